// Hugging Face Llama (LlamaForCausalLM) and Mixtral (MixtralForCausalLM): tessel's parameter names
// are Llama's; Mixtral renames the MoE block.
#include "tessel/ckpt/hf_common.h"

#include <limits>

namespace tessel::ckpt::hf {
namespace {

// Mixtral's names for the MoE block (tessel keeps DeepSeek-V3's "mlp.gate" / "mlp.experts.<e>.*_proj").
const std::vector<std::pair<std::string, std::string>> kMixtralNames = {
    {".mlp.gate.weight", ".block_sparse_moe.gate.weight"},
    {".gate_proj.weight", ".w1.weight"},
    {".down_proj.weight", ".w2.weight"},
    {".up_proj.weight", ".w3.weight"},
    {".mlp.experts.", ".block_sparse_moe.experts."}};

std::string rename(std::string name, bool to_hf) {
  for (const auto& [ours, theirs] : kMixtralNames) {
    const std::string& from = to_hf ? ours : theirs;
    const std::string& to = to_hf ? theirs : ours;
    if (const size_t at = name.find(from); at != std::string::npos) name.replace(at, from.size(), to);
  }
  return name;
}

// A Mixtral export: every layer MoE, softmax top-k over renormalised weights, no shared expert.
void check_mixtral_compatible(const nn::ModelConfig& c) {
  TESSEL_CHECK(c.moe_first_dense_layers == 0 && c.moe_shared_expert_intermediate_size == 0 &&
                   c.moe_router_score_function == "softmax" && c.moe_router_norm_topk_prob &&
                   c.moe_router_topk_scaling_factor == 1.0 && c.moe_router_num_groups == 1 &&
                   !c.moe_router_enable_expert_bias,
               "export-hf: this MoE model has no Hugging Face Mixtral form (needs every layer MoE, a softmax router "
               "with renormalised top-k, no shared expert, no groups, no expert bias); DeepSeek-V3-style MoE "
               "exports need multi-latent attention (model.arch deepseek_v3)");
}

}  // namespace

std::string llama_hf_name(const std::string& type, const std::string& tessel_name) {
  return type == "mixtral" ? rename(tessel_name, true) : tessel_name;
}

void parse_llama_config(const JsonFields& cfg, HfConfig& out) {
  nn::ModelConfig& m = out.model;
  const bool mixtral = out.model_type == "mixtral";
  m.arch = out.model_type;
  m.hidden_size = cfg.integer("hidden_size", 1, kMaxHfSize);
  m.ffn_hidden_size = cfg.integer("intermediate_size", 1, kMaxHfSize);
  m.num_attention_heads = cfg.integer("num_attention_heads", 1, kMaxHfSize);
  m.num_query_groups = cfg.integer_or("num_key_value_heads", m.num_attention_heads, 1, m.num_attention_heads);
  m.num_layers = cfg.integer("num_hidden_layers", 1, kMaxHfSize);
  m.vocab_size = cfg.integer("vocab_size", 1, kMaxHfSize);
  m.seq_length = cfg.integer_or("max_position_embeddings", 2048, 1, kMaxHfSize);
  m.norm_epsilon = cfg.number_or("rms_norm_eps", 1e-6, 0, 1, true);
  m.rotary_base = cfg.number_or("rope_theta", check_rope_scaling(cfg, 10000.0), 1, 1e12, true);
  m.tie_embeddings = cfg.boolean_or("tie_word_embeddings", false);
  if (mixtral) {  // softmax top-k over renormalised weights, every layer MoE
    m.num_experts = cfg.integer("num_local_experts", 1, kMaxHfSize);
    m.moe_router_topk = cfg.integer("num_experts_per_tok", 1, m.num_experts);
    m.moe_ffn_hidden_size = m.ffn_hidden_size;
    m.moe_aux_loss_coeff = cfg.number_or("router_aux_loss_coef", 0.0, 0, 1e6);
    m.moe_router_load_balancing_type = m.moe_aux_loss_coeff > 0 ? "aux_loss" : "none";
    warn_unless_zero(cfg, "router_jitter_noise", "tessel's router adds no noise", out);
  }
  // What changes the model's function and tessel does not implement.
  require_value(cfg, "hidden_act", "silu", "Llama and Mixtral MLPs here are SwiGLU: silu");
  require_value(cfg, "attention_bias", false, "tessel's Llama attention has no biases");
  require_value(cfg, "mlp_bias", false, "tessel's Llama MLP has no biases");
  require_value(cfg, "head_dim", m.hidden_size / m.num_attention_heads,
                "tessel's head size is hidden_size / num_attention_heads");
  if (cfg.has("sliding_window")) {  // equivalent to full attention when the window covers the context
    const int64_t window = cfg.integer("sliding_window", 1, std::numeric_limits<int64_t>::max());
    TESSEL_CHECK(window >= m.seq_length, "{}: sliding_window {} is not supported (tessel attends over the whole "
                 "context: the window must be null or at least max_position_embeddings {})", cfg.where(), window,
                 m.seq_length);
  }
  warn_unless_zero(cfg, "attention_dropout", "tessel trains without dropout", out);
}

void export_llama(const nn::ModelConfig& c, const nn::ParamStore& ps, NamedTensors& out, nlohmann::ordered_json& cfg) {
  const bool moe = c.num_experts > 0;  // Mixtral: Llama plus MoE blocks under their own names
  if (moe) check_mixtral_compatible(c);
  auto p = named(ps);
  for (const auto& s : ps.specs()) out.emplace_back(moe ? rename(s.name, true) : s.name, p[s.name]);
  cfg = {{"architectures", {moe ? "MixtralForCausalLM" : "LlamaForCausalLM"}},
         {"model_type", moe ? "mixtral" : "llama"},
         {"hidden_size", c.hidden_size},
         {"intermediate_size", moe ? c.expert_ffn() : c.ffn_hidden_size},
         {"num_attention_heads", c.num_attention_heads},
         {"num_key_value_heads", c.num_query_groups},
         {"num_hidden_layers", c.num_layers},
         {"vocab_size", c.vocab_size},
         {"max_position_embeddings", c.seq_length},
         {"rms_norm_eps", c.norm_epsilon},
         {"rope_theta", c.rotary_base},
         {"tie_word_embeddings", c.tie_embeddings},
         {"hidden_act", "silu"},
         {"torch_dtype", "float32"}};
  if (moe) {
    cfg["num_local_experts"] = c.num_experts;
    cfg["num_experts_per_tok"] = c.moe_router_topk;
    cfg["router_aux_loss_coef"] = c.moe_aux_loss_coeff;
  } else {
    cfg["attention_bias"] = false;
  }
}

void import_llama_tensors(const HfTensors& hf, HfImport& r) {
  for (const auto& [n, t] : hf.by_name) {
    // Older exports carry RoPE's inverse frequencies as a buffer, and tied models may repeat the
    // embedding as lm_head: neither is a parameter here.
    if (ends_with(n, "rotary_emb.inv_freq")) continue;
    if (r.model.tie_embeddings && n == "lm_head.weight") continue;
    r.tensors.emplace_back(r.model_type == "mixtral" ? rename(n, false) : n, t);
  }
}

}  // namespace tessel::ckpt::hf
