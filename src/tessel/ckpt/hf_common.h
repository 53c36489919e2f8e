#pragma once
// What the Hugging Face format families share (internal to ckpt: hf.cpp, hf_llama.cpp, hf_gpt2.cpp,
// hf_deepseek.cpp): tensor helpers, reading a directory's tensors, settings every family checks
// alike, and each family's entry points.
#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

#include "tessel/ckpt/hf.h"
#include "tessel/ckpt/json_fields.h"

namespace tessel::ckpt::hf {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// The largest size (layers, widths, vocabulary, positions, experts) a Hugging Face config may give:
// every real model is far below it, and products of a few of them stay inside int64.
inline constexpr int64_t kMaxHfSize = int64_t(1) << 24;

std::string layer(int64_t i);      // "model.layers.<i>."
std::string gpt_layer(int64_t i);  // "transformer.h.<i>."
bool ends_with(const std::string& s, const std::string& suffix);
int64_t layer_index(const std::string& name);  // <i> of "model.layers.<i>.<rest>", or -1
Tensor transposed(const Tensor& t);
Tensor rows(const Tensor& t, int64_t r0, int64_t r1);  // rows [r0, r1) of a 2-D tensor, elements of a 1-D one
Tensor concat_rows(const std::vector<Tensor>& parts);
std::map<std::string, Tensor> named(const nn::ParamStore& ps);  // tessel name -> parameter view

// A Hugging Face directory's tensors by name, in f32.
struct HfTensors {
  std::map<std::string, Tensor> by_name;
  std::string source;  // DIR/model.safetensors or DIR/model.safetensors.index.json
  // The tensor, or an error naming the source and the tensor; with `shape`, also its shape.
  const Tensor& at(const std::string& name) const;
  const Tensor& at(const std::string& name, const Shape& shape) const;
};
// Reads model.safetensors, or the shards model.safetensors.index.json lists: its weight_map must map
// names to files inside `dir` (an absolute path or one leaving the directory is refused, naming it),
// and every file must hold the tensors mapped to it.
HfTensors read_hf_tensors(const std::string& dir);

// The errors for a tensor the import needs and the directory lacks, and for one of another shape
// than the config implies (one wording everywhere).
[[noreturn]] void fail_missing_tensor(const std::string& source, const std::string& name);
void check_shape(const std::string& source, const std::string& name, const Tensor& t, const Shape& shape);
// Training-time settings tessel does not apply (dropout, router noise): a warning when non-zero.
void warn_unless_zero(const JsonFields& cfg, const std::string& key, const std::string& what, HfConfig& out);

// RoPE variants tessel does not implement (rope_scaling / rope_parameters with a type other than
// "default"): refused naming the type. Returns rope_parameters' rope_theta when it holds one.
double check_rope_scaling(const JsonFields& cfg, double rope_theta_fallback);
// A key that, when present, must hold `allowed` (what tessel implements), else refused with `why`.
void require_value(const JsonFields& cfg, const std::string& key, const nlohmann::json& allowed, const std::string& why);

// Families: Llama and Mixtral (hf_llama.cpp).
void parse_llama_config(const JsonFields& cfg, HfConfig& out);
void export_llama(const nn::ModelConfig& c, const nn::ParamStore& ps, NamedTensors& out, nlohmann::ordered_json& cfg);
void import_llama_tensors(const HfTensors& hf, HfImport& r);
std::string llama_hf_name(const std::string& type, const std::string& tessel_name);
// GPT-2 (hf_gpt2.cpp).
void parse_gpt2_config(const JsonFields& cfg, HfConfig& out);
void export_gpt2(const nn::ModelConfig& c, const nn::ParamStore& ps, NamedTensors& out, nlohmann::ordered_json& cfg);
void import_gpt2_tensors(const HfTensors& hf, HfImport& r);
// DeepSeek-V3 (hf_deepseek.cpp).
void parse_deepseek_config(const JsonFields& cfg, HfConfig& out);
void export_deepseek(const nn::ModelConfig& c, const nn::ParamStore& ps, const NamedTensors& state, NamedTensors& out,
                     nlohmann::ordered_json& cfg);
void import_deepseek_tensors(const HfTensors& hf, bool rope_interleaved, HfImport& r);

}  // namespace tessel::ckpt::hf
