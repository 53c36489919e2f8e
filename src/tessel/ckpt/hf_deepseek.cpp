// Hugging Face DeepSeek-V3 (DeepseekV3ForCausalLM; see hf.h and docs/architecture.md): tessel's names
// are Hugging Face's; RoPE rows interleaved, expert biases as e_score_correction_bias, the
// multi-token-prediction modules with copies of the embedding and head.
#include <algorithm>

#include "tessel/ckpt/hf_common.h"

namespace tessel::ckpt::hf {
namespace {
// DeepSeek-V3's RoPE rows: in every block of `period` rows, the `d` rows from `offset` on. tessel
// rotates halves (pairs j, j + d/2); Hugging Face stores them interleaved (pairs 2j, 2j + 1) and
// de-interleaves before its rotate-half: hf[2j] = ours[j], hf[2j + 1] = ours[d/2 + j].
Tensor interleave_rope_rows(const std::string& name, const Tensor& w, int64_t period, int64_t offset, int64_t d,
                            bool to_hf) {
  TESSEL_CHECK(w.dim() == 2 && w.size(0) > 0 && w.size(0) % period == 0 && offset + d <= period,
               "DeepSeek-V3 RoPE rows: tensor '{}' is {}, not a whole number of blocks of {} rows", name,
               shape_str(w.shape()), period);
  const Tensor in = w.is_contiguous() ? w : w.clone();
  Tensor out = in.clone();
  const int64_t rows = w.size(0), cols = w.size(1), half = d / 2;
  const float* src = in.data<float>();
  float* dst = out.data<float>();
  auto row = [cols](int64_t r) { return size_t(r * cols); };
  for (int64_t base = offset; base < rows; base += period)
    for (int64_t j = 0; j < half; ++j) {
      const int64_t even = base + 2 * j, odd = even + 1, lo = base + j, hi = base + half + j;
      if (to_hf) {
        std::copy_n(src + row(lo), cols, dst + row(even));
        std::copy_n(src + row(hi), cols, dst + row(odd));
      } else {
        std::copy_n(src + row(even), cols, dst + row(lo));
        std::copy_n(src + row(odd), cols, dst + row(hi));
      }
    }
  return out;
}

// Whether a DeepSeek-V3 tensor holds RoPE rows, and its blocks (period, offset).
bool rope_rows_of(const nn::ModelConfig& c, const std::string& name, int64_t& period, int64_t& offset) {
  if (ends_with(name, ".self_attn.q_proj.weight") || ends_with(name, ".self_attn.q_b_proj.weight")) {
    period = c.qk_head_dim + c.qk_pos_emb_head_dim;  // per head: nope rows, then rope rows
    offset = c.qk_head_dim;
    return true;
  }
  if (ends_with(name, ".self_attn.kv_a_proj_with_mqa.weight")) {
    period = c.kv_lora_rank + c.qk_pos_emb_head_dim;  // the latent, then the shared rope key
    offset = c.kv_lora_rank;
    return true;
  }
  return false;
}

Tensor convert_rope(const nn::ModelConfig& c, const std::string& name, const Tensor& t, bool to_hf) {
  int64_t period = 0, offset = 0;
  return rope_rows_of(c, name, period, offset) ? interleave_rope_rows(name, t, period, offset, c.qk_pos_emb_head_dim, to_hf)
                                               : t;
}

// What Hugging Face DeepSeek-V3 (noaux_tc routing) cannot express.
void check_deepseek_compatible(const nn::ModelConfig& c) {
  TESSEL_CHECK(c.mla(), "export-hf: multi-token prediction (model.mtp_num_layers {}) has a Hugging Face form only "
               "in DeepSeek-V3 models, which need multi-latent attention (model.arch deepseek_v3)", c.mtp_num_layers);
  if (c.num_experts == 0) return;
  TESSEL_CHECK(c.moe_router_score_function == "sigmoid",
               "export-hf: model.moe_router_score_function '{}' has no Hugging Face DeepSeek-V3 form (its noaux_tc "
               "router scores experts with a sigmoid)", c.moe_router_score_function);
  TESSEL_CHECK(c.moe_expert_capacity_factor == 0,
               "export-hf: model.moe_expert_capacity_factor {} drops tokens; Hugging Face DeepSeek-V3 routes every "
               "token (set it to 0)", c.moe_expert_capacity_factor);
  TESSEL_CHECK(c.num_experts / c.moe_router_num_groups >= 2,
               "export-hf: model.moe_router_num_groups {} leaves {} expert(s) per group; Hugging Face DeepSeek-V3 "
               "scores a group by its two best experts, so each group needs at least 2", c.moe_router_num_groups,
               c.num_experts / c.moe_router_num_groups);
  TESSEL_CHECK(c.moe_router_topk > 1 || !c.moe_router_norm_topk_prob,
               "export-hf: model.moe_router_topk 1 with moe_router_norm_topk_prob: DeepSeek's modeling_deepseek.py "
               "leaves a single expert's weight unnormalised while transformers normalises it (set "
               "moe_router_norm_topk_prob false)");
  TESSEL_CHECK(c.moe_shared_expert_intermediate_size % c.expert_ffn() == 0,
               "export-hf: model.moe_shared_expert_intermediate_size {} is not a multiple of moe_ffn_hidden_size {} "
               "(Hugging Face DeepSeek-V3 sizes the shared expert n_shared_experts x moe_intermediate_size)",
               c.moe_shared_expert_intermediate_size, c.expert_ffn());
}

}  // namespace

// DeepSeek-V3: tessel's names are Hugging Face's; RoPE rows interleaved, expert biases added, the
// multi-token-prediction modules given their copies of the embedding and head.
void export_deepseek(const nn::ModelConfig& c, const nn::ParamStore& ps, const NamedTensors& state, NamedTensors& out,
                     nlohmann::ordered_json& cfg) {
  check_deepseek_compatible(c);
  auto p = named(ps);
  std::map<std::string, Tensor> st(state.begin(), state.end());
  const Tensor& embed = p.at("model.embed_tokens.weight");
  const Tensor& head = c.tie_embeddings ? embed : p.at("lm_head.weight");
  for (const auto& s : ps.specs()) {
    out.emplace_back(s.name, convert_rope(c, s.name, p[s.name], true));
    if (ends_with(s.name, ".mlp.gate.weight")) {  // the router: its expert bias follows
      const std::string prefix = s.name.substr(0, s.name.size() - std::string("gate.weight").size());
      Tensor b = Tensor::zeros({c.num_experts}, DType::f32);  // none kept (no bias balancing)
      if (auto it = st.find(prefix + "expert_bias"); it != st.end()) b.copy_from(it->second);
      float* v = b.data<float>();
      const float lowest = *std::min_element(v, v + c.num_experts);
      if (lowest < 0)  // the same selection, and every kept expert's s + b > 0 (see hf.h)
        for (int64_t e = 0; e < c.num_experts; ++e) v[e] -= lowest;
      out.emplace_back(prefix + "gate.e_score_correction_bias", b);
    }
    if (ends_with(s.name, ".shared_head.norm.weight")) {  // the last tensor of an MTP module
      const std::string prefix = s.name.substr(0, s.name.size() - std::string("shared_head.norm.weight").size());
      out.emplace_back(prefix + "embed_tokens.weight", embed);
      out.emplace_back(prefix + "shared_head.head.weight", head);
    }
  }
  const bool moe = c.num_experts > 0;
  using json = nlohmann::ordered_json;
  cfg = {{"architectures", {"DeepseekV3ForCausalLM"}},
         {"model_type", "deepseek_v3"},
         {"vocab_size", c.vocab_size},
         {"hidden_size", c.hidden_size},
         {"intermediate_size", c.ffn_hidden_size},
         {"moe_intermediate_size", c.expert_ffn()},
         {"num_hidden_layers", c.num_layers},
         {"num_attention_heads", c.num_attention_heads},
         {"num_key_value_heads", c.num_attention_heads},
         {"n_shared_experts", moe ? json(c.moe_shared_expert_intermediate_size / c.expert_ffn()) : json(nullptr)},
         {"n_routed_experts", moe ? json(c.num_experts) : json(nullptr)},
         {"routed_scaling_factor", c.moe_router_topk_scaling_factor},
         {"kv_lora_rank", c.kv_lora_rank},
         {"q_lora_rank", c.q_lora_rank > 0 ? json(c.q_lora_rank) : json(nullptr)},
         {"qk_rope_head_dim", c.qk_pos_emb_head_dim},
         {"qk_nope_head_dim", c.qk_head_dim},
         {"v_head_dim", c.v_head_dim},
         {"topk_method", "noaux_tc"},
         {"n_group", c.moe_router_num_groups},
         {"topk_group", c.moe_router_group_topk},
         {"num_experts_per_tok", c.moe_router_topk},
         {"moe_layer_freq", 1},
         // Every layer dense when there are no experts (the MTP modules included).
         {"first_k_dense_replace", moe ? c.moe_first_dense_layers : c.num_layers + c.mtp_num_layers},
         {"norm_topk_prob", c.moe_router_norm_topk_prob},
         {"scoring_func", "sigmoid"},
         {"aux_loss_alpha", c.moe_router_load_balancing_type == "none" ? 0.0 : c.moe_aux_loss_coeff},
         {"seq_aux", c.moe_router_load_balancing_type != "aux_loss"},
         {"hidden_act", "silu"},
         {"max_position_embeddings", c.seq_length},
         {"initializer_range", c.init_method_std},
         {"rms_norm_eps", c.norm_epsilon},
         {"rope_theta", c.rotary_base},
         {"rope_scaling", nullptr},
         {"rope_interleave", true},
         {"attention_bias", false},
         {"attention_dropout", 0.0},
         {"tie_word_embeddings", c.tie_embeddings},
         {"num_nextn_predict_layers", c.mtp_num_layers},
         {"ep_size", 1},
         {"torch_dtype", "float32"}};
}

// DeepSeek-V3 config.json -> ModelConfig (what tessel cannot express is refused, naming the key).
void parse_deepseek_config(const JsonFields& cfg, HfConfig& out) {
  nn::ModelConfig& m = out.model;
  constexpr int64_t S = kMaxHfSize;
  TESSEL_CHECK(!cfg.has("quantization_config"), "{} has a quantization_config (FP8 block-quantised weights with "
               "weight_scale_inv): dequantise the weights to bf16 or fp32 first", cfg.where());
  const double rope_theta = check_rope_scaling(cfg, 10000.0);
  require_value(cfg, "topk_method", "noaux_tc",
                "tessel routes as noaux_tc does: top-k on sigmoid + bias within the best groups");
  require_value(cfg, "scoring_func", "sigmoid", "the noaux_tc router's affinities are sigmoids");
  require_value(cfg, "moe_layer_freq", 1, "every layer after first_k_dense_replace is MoE here");
  require_value(cfg, "attention_bias", false, "no attention biases");
  require_value(cfg, "hidden_act", "silu", "SwiGLU");
  m.arch = "deepseek_v3";
  m.hidden_size = cfg.integer("hidden_size", 1, S);
  m.ffn_hidden_size = cfg.integer("intermediate_size", 1, S);
  m.num_attention_heads = cfg.integer("num_attention_heads", 1, S);
  m.num_query_groups = m.num_attention_heads;
  require_value(cfg, "num_key_value_heads", m.num_attention_heads,
                "multi-latent attention has one key/value per head");
  m.num_layers = cfg.integer("num_hidden_layers", 1, S);
  m.vocab_size = cfg.integer("vocab_size", 1, S);
  m.seq_length = cfg.integer_or("max_position_embeddings", 2048, 1, S);
  m.norm_epsilon = cfg.number_or("rms_norm_eps", 1e-6, 0, 1, true);
  m.rotary_base = cfg.number_or("rope_theta", rope_theta, 1, 1e12, true);
  m.tie_embeddings = cfg.boolean_or("tie_word_embeddings", false);
  m.init_method_std = cfg.number_or("initializer_range", 0.02, 0, 1e6, true);
  m.q_lora_rank = cfg.integer_or("q_lora_rank", 0, 0, S);  // null or 0: no query latent
  m.kv_lora_rank = cfg.integer("kv_lora_rank", 1, S);
  m.qk_head_dim = cfg.integer("qk_nope_head_dim", 1, S);
  m.qk_pos_emb_head_dim = cfg.integer("qk_rope_head_dim", 1, S);
  m.v_head_dim = cfg.integer("v_head_dim", 1, S);
  m.mtp_num_layers = cfg.integer_or("num_nextn_predict_layers", 0, 0, S);
  out.rope_interleaved = cfg.boolean_or("rope_interleave", true);
  warn_unless_zero(cfg, "attention_dropout", "tessel trains without dropout", out);
  const int64_t experts = cfg.integer_or("n_routed_experts", 0, 0, S);
  m.moe_first_dense_layers = cfg.integer_or("first_k_dense_replace", 0, 0, S);
  if (experts > 0 && m.moe_first_dense_layers < m.num_layers + m.mtp_num_layers) {  // some layer is MoE
    m.num_experts = experts;
    m.moe_router_topk = cfg.integer("num_experts_per_tok", 1, experts);
    m.moe_ffn_hidden_size = cfg.integer("moe_intermediate_size", 1, S);
    m.moe_shared_expert_intermediate_size = cfg.integer_or("n_shared_experts", 0, 0, S) * m.moe_ffn_hidden_size;
    m.moe_router_score_function = "sigmoid";
    m.moe_router_num_groups = cfg.integer_or("n_group", 1, 1, experts);
    m.moe_router_group_topk = cfg.integer_or("topk_group", 1, 1, m.moe_router_num_groups);
    m.moe_router_norm_topk_prob = cfg.boolean_or("norm_topk_prob", true);  // transformers' default
    m.moe_router_topk_scaling_factor = cfg.number_or("routed_scaling_factor", 1.0, 0, 1e6, true);
    m.moe_router_enable_expert_bias = true;  // noaux_tc: auxiliary-loss-free balancing
    m.moe_aux_loss_coeff = cfg.number_or("aux_loss_alpha", 0.0, 0, 1e6);
    m.moe_router_load_balancing_type =
        m.moe_aux_loss_coeff > 0 ? (cfg.boolean_or("seq_aux", true) ? "seq_aux_loss" : "aux_loss") : "none";
  } else {
    m.moe_first_dense_layers = 0;
  }
}

// DeepSeek-V3 tensors -> tessel's: RoPE rows back in halves, expert biases to training state, the
// multi-token-prediction modules' copies of the embedding and head dropped (tessel shares them).
void import_deepseek_tensors(const HfTensors& hf, bool interleaved, HfImport& r) {
  const nn::ModelConfig& m = r.model;
  auto same = [](const Tensor& a, const Tensor& b) {
    return a.shape() == b.shape() && std::equal(a.data<float>(), a.data<float>() + a.numel(), b.data<float>());
  };
  for (const auto& [n, t] : hf.by_name) {
    if (ends_with(n, "rotary_emb.inv_freq")) continue;
    if (m.tie_embeddings && n == "lm_head.weight") continue;
    const int64_t layer = layer_index(n);
    if (ends_with(n, ".mlp.gate.e_score_correction_bias")) {
      const std::string prefix = n.substr(0, n.size() - std::string("gate.e_score_correction_bias").size());
      r.state.emplace_back(prefix + "expert_bias", t);  // main layers and MTP modules alike
      continue;
    }
    if (layer >= m.num_layers && (ends_with(n, ".embed_tokens.weight") || ends_with(n, ".shared_head.head.weight"))) {
      const bool head = ends_with(n, ".shared_head.head.weight");
      const Tensor& main = hf.at(head && !m.tie_embeddings ? "lm_head.weight" : "model.embed_tokens.weight");
      if (!same(t, main))
        r.warnings.push_back(n + " differs from the main model's " + (head ? "output head" : "embedding") +
                             "; tessel's multi-token-prediction modules share the main model's, which is kept");
      continue;
    }
    r.tensors.emplace_back(n, interleaved ? convert_rope(m, n, t, false) : t);
  }
}

}  // namespace tessel::ckpt::hf
