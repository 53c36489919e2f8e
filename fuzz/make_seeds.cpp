// Writes the seed corpora of the fuzz harnesses with tessel's own writers:
//   fuzz_make_seeds OUT_DIR CONFIG_DIR
// OUT_DIR/<target>/seed-* for the targets safetensors, idx, config_yaml, hf_config and
// checkpoint_metadata (fuzz/corpus/ in the repository holds the committed output; rerun it when a
// writer's format changes). CONFIG_DIR: the repository's configs/ (copied, and written back resolved).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "fuzz_support.h"
#include "tessel/ckpt/safetensors.h"
#include "tessel/data/indexed_dataset.h"
#include "tessel/train/config.h"
#include "tiny_models.h"

namespace fs = std::filesystem;
using namespace tessel;

namespace {

void copy_into(const fs::path& from, const fs::path& dir, const std::string& name) {
  fs::create_directories(dir);
  fs::copy_file(from, dir / name, fs::copy_options::overwrite_existing);
}

void safetensors_seeds(const fs::path& out, const fs::path& ckpt) {
  copy_into(ckpt / "step_00000002" / "model.safetensors", out, "seed-checkpoint-model.safetensors");
  // Every dtype, an empty tensor, a scalar and string metadata, in a file of a few hundred bytes.
  auto filled = [](Shape s, DType t) {
    Tensor x = Tensor::zeros(s, t);
    auto* b = static_cast<uint8_t*>(x.raw());
    for (size_t i = 0; i < x.nbytes(); ++i) b[i] = uint8_t(i * 37 + 11);
    return x;
  };
  ckpt::write_safetensors((out / "seed-dtypes.safetensors").string(), {{"format", "pt"}, {"step", "7"}},
                          {{"a.f32", filled({2, 3}, DType::f32)},
                           {"b.bf16", filled({4}, DType::bf16)},
                           {"c.f16", filled({1, 2}, DType::f16)},
                           {"d.e4m3", filled({3}, DType::e4m3)},
                           {"e.e5m2", filled({3}, DType::e5m2)},
                           {"f.i32", filled({2}, DType::i32)},
                           {"g.i64", filled({}, DType::i64)},
                           {"h.empty", filled({0, 4}, DType::f32)}});
}

void idx_seeds(const fs::path& out) {
  fs::create_directories(out);
  struct Seed {
    const char* name;
    data::IndexDType dtype;
    std::vector<std::vector<int64_t>> docs;
  };
  const std::vector<Seed> seeds{
      {"seed-u16-3docs", data::IndexDType::u16, {{1, 2, 3, 4, 0}, {5, 6, 0}, {7, 8, 9, 0}}},
      {"seed-i32-2docs", data::IndexDType::i32, {{70000, 1, 2, 3, 4, 5, 0}, {9, 0}}},
      {"seed-i64-4docs", data::IndexDType::i64, {{1, 0}, {2, 3, 0}, {4, 5, 6, 0}, {7, 8, 9, 10, 0}}},
  };
  for (const auto& s : seeds) {
    const std::string prefix = (fuzz::scratch_dir() / s.name).string();
    data::IndexedDatasetBuilder b(prefix, s.dtype);
    for (const auto& d : s.docs) b.add_document(d);
    b.finalize();
    copy_into(prefix + ".idx", out, std::string(s.name) + ".idx");
  }
}

void config_seeds(const fs::path& out, const fs::path& configs) {
  fs::create_directories(out);
  for (const auto& e : fs::directory_iterator(configs)) {
    if (e.path().extension() != ".yaml") continue;
    const std::string name = e.path().stem().string();
    copy_into(e.path(), out, "seed-" + name + ".yaml");
    std::ifstream in(e.path());
    std::stringstream text;
    text << in.rdbuf();
    try {  // planning configs (full-size shapes) need --set overrides to load: kept as they are
      const std::string resolved = train::Config::from_yaml_text(text.str(), {}, e.path().string()).to_yaml();
      fuzz::write_file(out / ("seed-" + name + "-resolved.yaml"), resolved);
    } catch (const Error& err) {
      std::fprintf(stderr, "fuzz_make_seeds: %s is kept without a resolved form: %s\n", e.path().c_str(), err.what());
    }
  }
}

void hf_config_seeds(const fs::path& out) {
  for (const auto& f : fuzz::hf_flavours()) {
    const fs::path d = fuzz::scratch_dir() / ("hf-" + f);
    fuzz::export_tiny_hf(f, d);
    copy_into(d / "config.json", out, "seed-" + f + ".json");
  }
}

void metadata_seeds(const fs::path& out, const fs::path& ckpt) {
  copy_into(ckpt / "step_00000002" / "metadata.json", out, "seed-step2.json");
  copy_into(ckpt / "step_00000001" / "metadata.json", out, "seed-step1.json");
  // A distributed checkpoint's (tessel-checkpoint-2): pieces, and block CRC-32s (64-byte blocks).
  const fs::path dist = fuzz::scratch_dir() / "distributed";
  ::setenv("TESSEL_TEST_CKPT_CRC_BLOCK_BYTES", "64", 1);
  fuzz::save_tiny_distributed_checkpoint(dist);
  ::unsetenv("TESSEL_TEST_CKPT_CRC_BLOCK_BYTES");
  copy_into(dist / "step_00000001" / "metadata.json", out, "seed-distributed-blocks.json");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s OUT_DIR CONFIG_DIR\n", argv[0]);
    return 2;
  }
  const fs::path out(argv[1]), configs(argv[2]);
  try {
    const fs::path ckpt = fuzz::scratch_dir() / "checkpoints";
    fuzz::save_tiny_checkpoints(ckpt);
    safetensors_seeds(out / "safetensors", ckpt);
    idx_seeds(out / "idx");
    config_seeds(out / "config_yaml", configs);
    hf_config_seeds(out / "hf_config");
    metadata_seeds(out / "checkpoint_metadata", ckpt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_make_seeds: %s\n", e.what());
    return 1;
  }
  std::exit(0);  // runs the scratch directory's cleanup
}
