// libFuzzer harness: a Hugging Face config.json read by `tessel import-hf`. The directory around it
// holds the model.safetensors that tessel exports for a tiny model of the flavour the input names
// (gpt2, mixtral or deepseek_v3 anywhere in the text; Llama otherwise), so an input close to a real
// config reaches the tensor mapping and the model validation. Seeds: fuzz/corpus/hf_config/.
#include <map>

#include "fuzz_support.h"
#include "tessel/ckpt/hf.h"
#include "tiny_models.h"

namespace {

// One exported directory per flavour, made on first use.
const std::filesystem::path& model_dir(const std::string& flavour) {
  static std::map<std::string, std::filesystem::path> dirs;
  auto it = dirs.find(flavour);
  if (it == dirs.end()) {
    const auto d = tessel::fuzz::scratch_dir() / flavour;
    tessel::fuzz::export_tiny_hf(flavour, d);
    it = dirs.emplace(flavour, d).first;
  }
  return it->second;
}

std::string flavour_named_in(std::string_view text) {
  for (const char* f : {"gpt2", "mixtral", "deepseek_v3"})
    if (text.find(f) != std::string_view::npos) return f;
  return "llama";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessel;
  const std::string_view text = fuzz::as_text(data, size);
  const auto& dir = model_dir(flavour_named_in(text));
  fuzz::write_file(dir / "config.json", text);
  fuzz::expect_success_or_error([&] {
    const ckpt::HfImport imp = ckpt::import_hf(dir.string());
    ckpt::model_overrides(imp.model);
  });
  return 0;
}
