// Hugging Face export / import: dispatch to the format families (hf_llama.cpp, hf_gpt2.cpp,
// hf_deepseek.cpp), config.json parsing, and placing imported tensors into a model.
#include "tessel/core/paths.h"
#include "tessel/ckpt/hf.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "tessel/ckpt/hf_common.h"
#include "tessel/ckpt/safetensors.h"

namespace tessel::ckpt {
namespace fs = std::filesystem;

std::string export_hf(const nn::ModelConfig& c, const nn::ParamStore& ps, const std::string& out_dir,
                      const std::vector<std::pair<std::string, Tensor>>& state) {
  const DeviceAccessScope host_copy;  // an export copies device memory to the host
  hf::NamedTensors out;
  out.reserve(ps.specs().size() + 8);
  nlohmann::ordered_json cfg;
  std::string flavour;
  if (c.mla() || c.mtp_num_layers > 0) {
    hf::export_deepseek(c, ps, state, out, cfg);
    flavour = "Hugging Face DeepSeek-V3";
  } else if (c.is_llama()) {
    hf::export_llama(c, ps, out, cfg);
    flavour = c.num_experts > 0 ? "Hugging Face Mixtral" : "Hugging Face Llama";
  } else {
    hf::export_gpt2(c, ps, out, cfg);
    flavour = "Hugging Face GPT-2";
  }
  // Views into the flat buffer are written as they are (contiguous); clones for transposed ones.
  hf::NamedTensors dense;
  for (auto& [n, t] : out) dense.emplace_back(n, t.is_contiguous() ? t : t.clone());
  fs::create_directories(out_dir);  // after the checks: a refused export leaves nothing behind
  write_safetensors((fs::path(out_dir) / "model.safetensors").string(), {{"format", "pt"}}, dense);
  std::ofstream(fs::path(out_dir) / "config.json") << cfg.dump(2) << "\n";
  return flavour;
}

HfConfig parse_hf_config(const nlohmann::json& json, const std::string& file) {
  const JsonFields cfg(json, "import-hf: " + file);
  HfConfig out;
  out.model_type = cfg.string("model_type");
  if (out.model_type == "llama" || out.model_type == "mixtral")
    hf::parse_llama_config(cfg, out);
  else if (out.model_type == "gpt2")
    hf::parse_gpt2_config(cfg, out);
  else if (out.model_type == "deepseek_v3")
    hf::parse_deepseek_config(cfg, out);
  else
    TESSEL_FAIL("import-hf: {}: model_type '{}' is not supported (allowed: llama, mixtral, gpt2, deepseek_v3)", file,
                out.model_type);
  try {
    out.model.validate();  // names tessel's keys (model.*): say which file they came from
  } catch (const Error& e) {
    TESSEL_FAIL("import-hf: {} describes a model tessel cannot build: {}", file, e.what());
  }
  return out;
}

HfConfig parse_hf_config_text(const std::string& text, const std::string& file) {
  return parse_hf_config(parse_json_text(text, file, "import-hf"), file);
}

HfImport import_hf(const std::string& dir) {
  const fs::path d(dir);
  TESSEL_CHECK(is_directory_path(dir), "import-hf: '{}' is not a directory", dir);
  TESSEL_CHECK(path_exists((d / "config.json").string()), "import-hf: '{}' has no config.json", dir);
  const std::string file = (d / "config.json").string();
  HfConfig cfg = parse_hf_config(read_json_file(file, "import-hf"), file);
  const hf::HfTensors tensors = hf::read_hf_tensors(dir);
  HfImport r;
  r.model = cfg.model;
  r.model_type = cfg.model_type;
  r.source = tensors.source;
  r.warnings = std::move(cfg.warnings);
  // The renames, transposes and row interleaving work on the file's tensors on the host, before
  // copy_into moves them to the device.
  const DeviceAccessScope host_side;
  if (r.model_type == "gpt2")
    hf::import_gpt2_tensors(tensors, r);
  else if (r.model_type == "deepseek_v3")
    hf::import_deepseek_tensors(tensors, cfg.rope_interleaved, r);
  else
    hf::import_llama_tensors(tensors, r);
  return r;
}

std::vector<std::string> copy_into(const HfImport& imp, nn::Model& model) {
  const DeviceAccessScope host_copy;  // an import copies host memory to the device
  nn::ParamStore& ps = model.params();
  std::vector<std::string> warnings;
  std::map<std::string, const Tensor*> left;  // imported, not yet placed
  for (const auto& [n, t] : imp.tensors) left[n] = &t;
  for (const auto& s : ps.specs()) {
    const std::string hf_name = hf::llama_hf_name(imp.model_type, s.name);  // GPT-2 names are checked on reading
    const auto it = left.find(s.name);
    if (it == left.end()) hf::fail_missing_tensor(imp.source, hf_name);
    hf::check_shape(imp.source, hf_name, *it->second, s.shape);
    // A NaN or infinity imports as it is (the file may be what someone wants to inspect), but a
    // model holding one cannot train or generate: said, naming the tensor.
    if (it->second->dtype() == DType::f32 && it->second->is_contiguous()) {
      const float* v = it->second->data<float>();
      const int64_t n = it->second->numel();
      const int64_t bad = std::count_if(v, v + n, [](float x) { return !std::isfinite(x); });
      if (bad > 0)
        warnings.push_back(fmt::format("tensor '{}' holds {} non-finite value{} (NaN or infinity): the model cannot "
                                       "train, evaluate or generate from it", hf_name, bad, bad == 1 ? "" : "s"));
    }
    ps.param(s.name).copy_from(*it->second);
    left.erase(it);
  }
  TESSEL_CHECK(left.empty(), "import-hf: {}: tensor '{}' has no place in the {} model config.json describes",
               imp.source, left.empty() ? "" : hf::llama_hf_name(imp.model_type, left.begin()->first),
               imp.model.arch);
  ps.refresh_compute_copy();
  const std::string bias = "expert_bias";
  for (const auto& name : model.load_state_tensors(imp.state)) {
    if (!hf::ends_with(name, "." + bias)) {
      warnings.push_back("no " + name + ": it starts afresh");
      continue;
    }
    const std::string hf_name = name.substr(0, name.size() - bias.size()) + "gate.e_score_correction_bias";
    if (std::none_of(imp.state.begin(), imp.state.end(), [&](const auto& p) { return p.first == name; }))
      hf::fail_missing_tensor(imp.source, hf_name);
    TESSEL_FAIL("import-hf: {}: tensor '{}' does not hold one bias per routed expert ({})", imp.source, hf_name,
                imp.model.num_experts);
  }
  return warnings;
}

std::vector<std::string> model_overrides(const nn::ModelConfig& m) {
  auto num = [](double v) { return fmt::format("{}", v); };
  auto flag = [](bool v) { return std::string(v ? "true" : "false"); };
  std::vector<std::string> sets = {
      "model.arch=" + m.arch,
      "model.num_layers=" + std::to_string(m.num_layers),
      "model.hidden_size=" + std::to_string(m.hidden_size),
      "model.num_attention_heads=" + std::to_string(m.num_attention_heads),
      "model.num_query_groups=" + std::to_string(m.num_query_groups),
      "model.ffn_hidden_size=" + std::to_string(m.ffn_hidden_size),
      "model.vocab_size=" + std::to_string(m.vocab_size),
      "model.seq_length=" + std::to_string(m.seq_length),
      "model.norm_epsilon=" + num(m.norm_epsilon),
      "model.rotary_base=" + num(m.rotary_base),
      "model.tie_embeddings=" + flag(m.tie_embeddings),
  };
  if (m.num_experts > 0)
    sets.insert(sets.end(), {"model.num_experts=" + std::to_string(m.num_experts),
                             "model.moe_router_topk=" + std::to_string(m.moe_router_topk),
                             "model.moe_ffn_hidden_size=" + std::to_string(m.moe_ffn_hidden_size),
                             "model.moe_router_load_balancing_type=" + m.moe_router_load_balancing_type,
                             "model.moe_aux_loss_coeff=" + num(m.moe_aux_loss_coeff)});
  if (m.mla()) {
    sets.insert(sets.end(), {"model.init_method_std=" + num(m.init_method_std),
                             "model.q_lora_rank=" + std::to_string(m.q_lora_rank),
                             "model.kv_lora_rank=" + std::to_string(m.kv_lora_rank),
                             "model.qk_head_dim=" + std::to_string(m.qk_head_dim),
                             "model.qk_pos_emb_head_dim=" + std::to_string(m.qk_pos_emb_head_dim),
                             "model.v_head_dim=" + std::to_string(m.v_head_dim),
                             "model.mtp_num_layers=" + std::to_string(m.mtp_num_layers)});
    if (m.num_experts > 0)
      sets.insert(sets.end(),
                  {"model.moe_shared_expert_intermediate_size=" + std::to_string(m.moe_shared_expert_intermediate_size),
                   "model.moe_first_dense_layers=" + std::to_string(m.moe_first_dense_layers),
                   "model.moe_router_score_function=" + m.moe_router_score_function,
                   "model.moe_router_num_groups=" + std::to_string(m.moe_router_num_groups),
                   "model.moe_router_group_topk=" + std::to_string(m.moe_router_group_topk),
                   "model.moe_router_norm_topk_prob=" + flag(m.moe_router_norm_topk_prob),
                   "model.moe_router_topk_scaling_factor=" + num(m.moe_router_topk_scaling_factor),
                   "model.moe_router_enable_expert_bias=" + flag(m.moe_router_enable_expert_bias)});
  }
  return sets;
}

}  // namespace tessel::ckpt
