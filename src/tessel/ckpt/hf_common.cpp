#include "tessel/ckpt/hf_common.h"

#include <filesystem>
#include <set>

#include "tessel/ckpt/safetensors.h"

namespace tessel::ckpt::hf {
namespace fs = std::filesystem;

std::string layer(int64_t i) { return "model.layers." + std::to_string(i) + "."; }
std::string gpt_layer(int64_t i) { return "transformer.h." + std::to_string(i) + "."; }

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int64_t layer_index(const std::string& name) {
  const std::string p = "model.layers.";
  if (name.compare(0, p.size(), p) != 0) return -1;
  const size_t dot = name.find('.', p.size());
  if (dot == std::string::npos || dot == p.size() || dot - p.size() > 9) return -1;  // 9 digits: no overflow
  for (size_t i = p.size(); i < dot; ++i)
    if (name[i] < '0' || name[i] > '9') return -1;
  return std::stoll(name.substr(p.size(), dot - p.size()));
}

Tensor transposed(const Tensor& t) { return t.transpose(0, 1).clone(); }

Tensor rows(const Tensor& t, int64_t r0, int64_t r1) { return t.slice(0, r0, r1).clone(); }

Tensor concat_rows(const std::vector<Tensor>& parts) {
  int64_t n = 0;
  for (const auto& p : parts) n += p.size(0);
  Shape s = parts[0].shape();
  s[0] = n;
  Tensor out = Tensor::empty(s, DType::f32);
  int64_t r = 0;
  for (const auto& p : parts) {
    out.slice(0, r, r + p.size(0)).copy_from(p);
    r += p.size(0);
  }
  return out;
}

std::map<std::string, Tensor> named(const nn::ParamStore& ps) {
  std::map<std::string, Tensor> m;
  for (const auto& s : ps.specs()) m[s.name] = ps.param_at(s.offset, s.shape);
  return m;
}

void fail_missing_tensor(const std::string& source, const std::string& name) {
  TESSEL_FAIL("import-hf: {} has no tensor '{}'", source, name);
}

const Tensor& HfTensors::at(const std::string& name) const {
  const auto it = by_name.find(name);
  if (it == by_name.end()) fail_missing_tensor(source, name);
  return it->second;
}

void check_shape(const std::string& source, const std::string& name, const Tensor& t, const Shape& shape) {
  TESSEL_CHECK(t.shape() == shape, "import-hf: {}: tensor '{}' is {}, config.json implies {}", source, name,
               shape_str(t.shape()), shape_str(shape));
}

const Tensor& HfTensors::at(const std::string& name, const Shape& shape) const {
  const Tensor& t = at(name);
  check_shape(source, name, t, shape);
  return t;
}

void warn_unless_zero(const JsonFields& cfg, const std::string& key, const std::string& what, HfConfig& out) {
  const double v = cfg.number_or(key, 0.0, 0.0, 1e9);
  if (v != 0)
    out.warnings.push_back(fmt::format("{} {} in config.json is not applied: {}", key, v, what));
}

namespace {

// A weight_map value: a file inside the model directory. Checked on the path's text after
// normalisation, not on where symbolic links lead: the Hugging Face hub's cache links every file of
// a snapshot to ../../blobs, and those directories must import.
std::string confined_shard(const std::string& index, const std::string& tensor, const std::string& file) {
  const fs::path p = fs::path(file).lexically_normal();
  const bool inside = !file.empty() && p.is_relative() && !p.has_root_name() && !p.empty() &&
                      *p.begin() != ".." && p != "." && !p.filename().empty();
  TESSEL_CHECK(inside, "import-hf: {}: weight_map maps tensor '{}' to '{}', which is not a file inside the model "
               "directory (absolute paths and paths leaving it are refused)", index, tensor, file);
  return p.string();
}

}  // namespace

HfTensors read_hf_tensors(const std::string& dir) {
  const fs::path d(dir);
  HfTensors r;
  std::map<std::string, std::string> mapped;  // tensor -> shard, from the index
  std::vector<std::string> files;
  const fs::path index = d / "model.safetensors.index.json";
  if (fs::exists(index)) {
    r.source = index.string();
    const nlohmann::json idx = read_json_file(r.source, "import-hf");
    const JsonFields map = JsonFields(idx, "import-hf: " + r.source).object("weight_map");
    std::set<std::string> shards;
    for (const auto& [tensor, value] : map.json().items()) {
      (void)value;
      const std::string shard = confined_shard(r.source, tensor, map.string(tensor));
      mapped[tensor] = shard;
      shards.insert(shard);
    }
    TESSEL_CHECK(!shards.empty(), "import-hf: {}: weight_map lists no tensors", r.source);
    files.assign(shards.begin(), shards.end());
  } else {
    r.source = (d / "model.safetensors").string();
    TESSEL_CHECK(fs::exists(r.source), "import-hf: '{}' has neither model.safetensors nor model.safetensors.index.json",
                 dir);
    files = {"model.safetensors"};
  }
  std::map<std::string, std::string> shard_of;  // where each tensor was read
  for (const auto& f : files) {
    const std::string path = (d / f).string();
    const auto st = read_safetensors(path);
    for (const auto& [n, t] : st.tensors) {
      TESSEL_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::bf16 || t.dtype() == DType::f16,
                   "import-hf: {}: tensor '{}' is {}; import reads F32, BF16 or F16 tensors", path, n,
                   dtype_name(t.dtype()));
      const auto [it, fresh] = shard_of.emplace(n, f);
      TESSEL_CHECK(fresh, "import-hf: tensor '{}' is in both {} and {}", n, (d / it->second).string(), path);
      r.by_name[n] = t.dtype() == DType::f32 ? t : t.to(DType::f32);
    }
  }
  for (const auto& [tensor, shard] : mapped) {
    const auto it = shard_of.find(tensor);
    TESSEL_CHECK(it != shard_of.end() && it->second == shard,
                 "import-hf: {}: weight_map maps tensor '{}' to {}, which does not hold it", r.source, tensor, shard);
  }
  return r;
}

double check_rope_scaling(const JsonFields& cfg, double rope_theta_fallback) {
  for (const std::string key : {"rope_scaling", "rope_parameters"}) {  // newer transformers: rope_parameters
    if (!cfg.has(key)) continue;
    const JsonFields rope = cfg.object(key);
    const std::string type = rope.has("rope_type") ? rope.string("rope_type") : rope.string_or("type", "");
    TESSEL_CHECK(type == "default", "{}: {} type '{}' is not supported yet (tessel's RoPE is unscaled: {} must be "
                 "null or of type 'default')", cfg.where(), key, type, key);
    if (rope.has("rope_theta")) rope_theta_fallback = rope.number("rope_theta", 1, 1e12, true);
  }
  return rope_theta_fallback;
}

void require_value(const JsonFields& cfg, const std::string& key, const nlohmann::json& allowed,
                   const std::string& why) {
  if (cfg.has(key))
    TESSEL_CHECK(cfg.raw(key) == allowed, "{}: {} {} is not supported ({})", cfg.where(), key, cfg.raw(key).dump(),
                 why);
}

}  // namespace tessel::ckpt::hf
