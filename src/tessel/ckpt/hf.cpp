#include "tessel/ckpt/hf.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "tessel/ckpt/safetensors.h"

namespace tessel::ckpt {
namespace fs = std::filesystem;

namespace {

std::string layer(int64_t i) { return "model.layers." + std::to_string(i) + "."; }
std::string gpt_layer(int64_t i) { return "transformer.h." + std::to_string(i) + "."; }

Tensor transposed(const Tensor& t) { return t.transpose(0, 1).clone(); }

// Rows [r0, r1) of a 2-D tensor, or elements of a 1-D one.
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

// tessel name -> tensor, from the parameter store.
std::map<std::string, Tensor> named(const nn::ParamStore& ps) {
  std::map<std::string, Tensor> m;
  for (const auto& s : ps.specs()) m[s.name] = ps.param_at(s.offset, s.shape);
  return m;
}

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

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The layer index of "model.layers.<i>.<rest>", or -1.
int64_t layer_index(const std::string& name) {
  const std::string p = "model.layers.";
  if (name.compare(0, p.size(), p) != 0) return -1;
  const size_t dot = name.find('.', p.size());
  if (dot == std::string::npos || dot == p.size()) return -1;
  for (size_t i = p.size(); i < dot; ++i)
    if (name[i] < '0' || name[i] > '9') return -1;
  return std::stoll(name.substr(p.size(), dot - p.size()));
}

// DeepSeek-V3's RoPE rows: in every block of `period` rows, the `d` rows from `offset` on. tessel
// rotates halves (pairs j, j + d/2); Hugging Face stores them interleaved (pairs 2j, 2j + 1) and
// de-interleaves before its rotate-half: hf[2j] = ours[j], hf[2j + 1] = ours[d/2 + j].
Tensor interleave_rope_rows(const Tensor& w, int64_t period, int64_t offset, int64_t d, bool to_hf) {
  const Tensor in = w.is_contiguous() ? w : w.clone();
  Tensor out = in.clone();
  const int64_t rows = w.size(0), cols = w.numel() / rows, half = d / 2;
  TESSEL_CHECK(rows % period == 0 && offset + d <= period, "RoPE rows: {} rows are not blocks of {}", rows, period);
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
  return rope_rows_of(c, name, period, offset) ? interleave_rope_rows(t, period, offset, c.qk_pos_emb_head_dim, to_hf)
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

// DeepSeek-V3: tessel's names are Hugging Face's; RoPE rows interleaved, expert biases added, the
// multi-token-prediction modules given their copies of the embedding and head.
void export_deepseek(const nn::ModelConfig& c, const nn::ParamStore& ps, std::map<std::string, Tensor>& p,
                     const std::vector<std::pair<std::string, Tensor>>& state,
                     std::vector<std::pair<std::string, Tensor>>& out, nlohmann::ordered_json& cfg) {
  check_deepseek_compatible(c);
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
void import_deepseek_config(const nlohmann::json& cfg, const std::string& dir, nn::ModelConfig& m) {
  auto key_is = [&](const char* key, auto expected, const char* why) {
    if (cfg.contains(key) && !cfg[key].is_null())
      TESSEL_CHECK(cfg[key] == expected, "import-hf: {}/config.json: {} {} is not supported ({})", dir, key,
                   cfg[key].dump(), why);
  };
  TESSEL_CHECK(!cfg.contains("quantization_config") || cfg["quantization_config"].is_null(),
               "import-hf: {}/config.json has a quantization_config (FP8 block-quantised weights with "
               "weight_scale_inv): dequantise the weights to bf16 or fp32 first", dir);
  TESSEL_CHECK(!cfg.contains("rope_scaling") || cfg["rope_scaling"].is_null(),
               "import-hf: {}/config.json: rope_scaling {} is not supported (tessel's RoPE has no YaRN scaling)",
               dir, cfg.contains("rope_scaling") ? cfg["rope_scaling"].dump() : "");
  // Newer transformers write rope_parameters {rope_type, rope_theta, ...} instead.
  const nlohmann::json rope = cfg.contains("rope_parameters") && cfg["rope_parameters"].is_object()
                                  ? cfg["rope_parameters"] : nlohmann::json::object();
  TESSEL_CHECK(rope.value("rope_type", std::string("default")) == "default",
               "import-hf: {}/config.json: rope_parameters {} is not supported (tessel's RoPE has no scaling)", dir,
               rope.dump());
  key_is("topk_method", "noaux_tc", "tessel routes as noaux_tc does: top-k on sigmoid + bias within the best groups");
  key_is("scoring_func", "sigmoid", "the noaux_tc router's affinities are sigmoids");
  key_is("moe_layer_freq", 1, "every layer after first_k_dense_replace is MoE here");
  key_is("attention_bias", false, "no attention biases");
  key_is("hidden_act", "silu", "SwiGLU");
  m.arch = "deepseek_v3";
  m.hidden_size = cfg.at("hidden_size");
  m.ffn_hidden_size = cfg.at("intermediate_size");
  m.num_attention_heads = cfg.at("num_attention_heads");
  m.num_query_groups = m.num_attention_heads;
  key_is("num_key_value_heads", m.num_attention_heads, "multi-latent attention has one key/value per head");
  m.num_layers = cfg.at("num_hidden_layers");
  m.vocab_size = cfg.at("vocab_size");
  m.seq_length = cfg.value("max_position_embeddings", int64_t(2048));
  m.norm_epsilon = cfg.value("rms_norm_eps", 1e-6);
  m.rotary_base = cfg.value("rope_theta", rope.value("rope_theta", 10000.0));
  m.tie_embeddings = cfg.value("tie_word_embeddings", false);
  m.init_method_std = cfg.value("initializer_range", 0.02);
  auto int_or = [&](const char* key, int64_t fallback) {
    return cfg.contains(key) && !cfg[key].is_null() ? cfg[key].get<int64_t>() : fallback;
  };
  m.q_lora_rank = int_or("q_lora_rank", 0);
  m.kv_lora_rank = cfg.at("kv_lora_rank");
  m.qk_head_dim = cfg.at("qk_nope_head_dim");
  m.qk_pos_emb_head_dim = cfg.at("qk_rope_head_dim");
  m.v_head_dim = cfg.at("v_head_dim");
  m.mtp_num_layers = int_or("num_nextn_predict_layers", 0);
  const int64_t experts = int_or("n_routed_experts", 0);
  m.moe_first_dense_layers = int_or("first_k_dense_replace", 0);
  if (experts > 0 && m.moe_first_dense_layers < m.num_layers + m.mtp_num_layers) {  // some layer is MoE
    m.num_experts = experts;
    m.moe_router_topk = cfg.at("num_experts_per_tok");
    m.moe_ffn_hidden_size = cfg.at("moe_intermediate_size");
    m.moe_shared_expert_intermediate_size = int_or("n_shared_experts", 0) * m.moe_ffn_hidden_size;
    m.moe_router_score_function = "sigmoid";
    m.moe_router_num_groups = int_or("n_group", 1);
    m.moe_router_group_topk = int_or("topk_group", 1);
    m.moe_router_norm_topk_prob = cfg.value("norm_topk_prob", true);  // transformers' default
    m.moe_router_topk_scaling_factor = cfg.value("routed_scaling_factor", 1.0);
    m.moe_router_enable_expert_bias = true;  // noaux_tc: auxiliary-loss-free balancing
    m.moe_aux_loss_coeff = cfg.contains("aux_loss_alpha") && !cfg["aux_loss_alpha"].is_null()
                               ? cfg["aux_loss_alpha"].get<double>() : 0.0;
    m.moe_router_load_balancing_type =
        m.moe_aux_loss_coeff > 0 ? (cfg.value("seq_aux", true) ? "seq_aux_loss" : "aux_loss") : "none";
  } else {
    m.moe_first_dense_layers = 0;
  }
}

// DeepSeek-V3 tensors -> tessel's: RoPE rows back in halves, expert biases to training state, the
// multi-token-prediction modules' copies of the embedding and head dropped (tessel shares them).
void import_deepseek_tensors(const nlohmann::json& cfg, const std::string& dir, std::map<std::string, Tensor>& hf,
                             HfImport& r) {
  const nn::ModelConfig& m = r.model;
  const bool interleaved = cfg.value("rope_interleave", true);
  auto find = [&](const std::string& n) -> const Tensor& {
    auto it = hf.find(n);
    TESSEL_CHECK(it != hf.end(), "import-hf: '{}' has no tensor '{}'", dir, n);
    return it->second;
  };
  auto same = [](const Tensor& a, const Tensor& b) {
    return a.shape() == b.shape() && std::equal(a.data<float>(), a.data<float>() + a.numel(), b.data<float>());
  };
  for (auto& [n, t] : hf) {
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
      const Tensor& main = find(head && !m.tie_embeddings ? "lm_head.weight" : "model.embed_tokens.weight");
      if (!same(t, main))
        r.warnings.push_back(n + " differs from the main model's " + (head ? "output head" : "embedding") +
                             "; tessel's multi-token-prediction modules share the main model's, which is kept");
      continue;
    }
    r.tensors.emplace_back(n, interleaved ? convert_rope(m, n, t, false) : t);
  }
}

}  // namespace

std::string export_hf(const nn::ModelConfig& c, const nn::ParamStore& ps, const std::string& out_dir,
                      const std::vector<std::pair<std::string, Tensor>>& state) {
  auto p = named(ps);
  std::vector<std::pair<std::string, Tensor>> out;
  out.reserve(ps.specs().size() + 8);
  nlohmann::ordered_json cfg;
  std::string flavour;
  if (c.mla() || c.mtp_num_layers > 0) {
    export_deepseek(c, ps, p, state, out, cfg);
    flavour = "Hugging Face DeepSeek-V3";
  } else if (c.is_llama()) {
    const bool moe = c.num_experts > 0;  // Mixtral: Llama plus MoE blocks under their own names
    if (moe) check_mixtral_compatible(c);
    flavour = moe ? "Hugging Face Mixtral" : "Hugging Face Llama";
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
  } else {
    TESSEL_CHECK(c.num_query_groups == c.num_attention_heads,
                 "export-hf: GPT-2 naming has no grouped-query attention (num_query_groups {} != heads {})",
                 c.num_query_groups, c.num_attention_heads);
    out.emplace_back("transformer.wte.weight", p["model.embed_tokens.weight"]);
    out.emplace_back("transformer.wpe.weight", p["model.embed_positions.weight"]);
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const std::string t = layer(i), g = gpt_layer(i);
      out.emplace_back(g + "ln_1.weight", p[t + "input_layernorm.weight"]);
      out.emplace_back(g + "ln_1.bias", p[t + "input_layernorm.bias"]);
      // Conv1D stores [in, out]; c_attn is q | k | v along out.
      out.emplace_back(g + "attn.c_attn.weight",
                       transposed(concat_rows({p[t + "self_attn.q_proj.weight"], p[t + "self_attn.k_proj.weight"],
                                               p[t + "self_attn.v_proj.weight"]})));
      out.emplace_back(g + "attn.c_attn.bias", concat_rows({p[t + "self_attn.q_proj.bias"], p[t + "self_attn.k_proj.bias"],
                                                           p[t + "self_attn.v_proj.bias"]}));
      out.emplace_back(g + "attn.c_proj.weight", transposed(p[t + "self_attn.o_proj.weight"]));
      out.emplace_back(g + "attn.c_proj.bias", p[t + "self_attn.o_proj.bias"]);
      out.emplace_back(g + "ln_2.weight", p[t + "post_attention_layernorm.weight"]);
      out.emplace_back(g + "ln_2.bias", p[t + "post_attention_layernorm.bias"]);
      out.emplace_back(g + "mlp.c_fc.weight", transposed(p[t + "mlp.up_proj.weight"]));
      out.emplace_back(g + "mlp.c_fc.bias", p[t + "mlp.up_proj.bias"]);
      out.emplace_back(g + "mlp.c_proj.weight", transposed(p[t + "mlp.down_proj.weight"]));
      out.emplace_back(g + "mlp.c_proj.bias", p[t + "mlp.down_proj.bias"]);
    }
    out.emplace_back("transformer.ln_f.weight", p["model.norm.weight"]);
    out.emplace_back("transformer.ln_f.bias", p["model.norm.bias"]);
    if (!c.tie_embeddings) out.emplace_back("lm_head.weight", p["lm_head.weight"]);
    flavour = "Hugging Face GPT-2";
    cfg = {{"architectures", {"GPT2LMHeadModel"}},
           {"model_type", "gpt2"},
           {"n_embd", c.hidden_size},
           {"n_head", c.num_attention_heads},
           {"n_layer", c.num_layers},
           {"n_inner", c.ffn_hidden_size},
           {"n_positions", c.seq_length},
           {"n_ctx", c.seq_length},
           {"vocab_size", c.vocab_size},
           {"layer_norm_epsilon", c.norm_epsilon},
           {"activation_function", "gelu_new"},
           {"tie_word_embeddings", c.tie_embeddings},
           {"torch_dtype", "float32"}};
  }
  // Views into the flat buffer are written as they are (contiguous); clones for transposed ones.
  std::vector<std::pair<std::string, Tensor>> dense;
  for (auto& [n, t] : out) dense.emplace_back(n, t.is_contiguous() ? t : t.clone());
  fs::create_directories(out_dir);  // after the checks: a refused export leaves nothing behind
  write_safetensors((fs::path(out_dir) / "model.safetensors").string(), {{"format", "pt"}}, dense);
  std::ofstream(fs::path(out_dir) / "config.json") << cfg.dump(2) << "\n";
  return flavour;
}

HfImport import_hf(const std::string& dir) {
  const fs::path d(dir);
  TESSEL_CHECK(fs::exists(d / "config.json"), "import-hf: '{}' has no config.json", dir);
  nlohmann::json cfg;
  try {
    cfg = nlohmann::json::parse(std::ifstream(d / "config.json"));
  } catch (const nlohmann::json::exception& e) {
    TESSEL_FAIL("import-hf: {}/config.json is not valid JSON: {}", dir, e.what());
  }
  // Tensors from one file or from the shards an index names.
  std::map<std::string, Tensor> hf;
  std::vector<std::string> files;
  if (fs::exists(d / "model.safetensors.index.json")) {
    const auto idx = nlohmann::json::parse(std::ifstream(d / "model.safetensors.index.json"));
    std::set<std::string> shards;
    for (auto it = idx.at("weight_map").begin(); it != idx.at("weight_map").end(); ++it)
      shards.insert(it.value().get<std::string>());
    files.assign(shards.begin(), shards.end());
  } else {
    TESSEL_CHECK(fs::exists(d / "model.safetensors"),
                 "import-hf: '{}' has neither model.safetensors nor model.safetensors.index.json", dir);
    files = {"model.safetensors"};
  }
  for (const auto& f : files) {
    const auto st = read_safetensors((d / f).string());
    for (const auto& [n, t] : st.tensors) hf[n] = t.dtype() == DType::f32 ? t : t.to(DType::f32);
  }
  auto take = [&](const std::string& n) -> Tensor {
    auto it = hf.find(n);
    TESSEL_CHECK(it != hf.end(), "import-hf: '{}' has no tensor '{}'", dir, n);
    return it->second;
  };
  const std::string type = cfg.value("model_type", "");
  HfImport r;
  auto& m = r.model;
  if (type == "llama" || type == "mixtral") {
    m.arch = type;
    m.hidden_size = cfg.at("hidden_size");
    m.ffn_hidden_size = cfg.at("intermediate_size");
    if (type == "mixtral") {  // softmax top-k over renormalised weights, every layer MoE
      m.num_experts = cfg.at("num_local_experts");
      m.moe_router_topk = cfg.at("num_experts_per_tok");
      m.moe_ffn_hidden_size = m.ffn_hidden_size;
      m.moe_aux_loss_coeff = cfg.value("router_aux_loss_coef", 0.0);
      m.moe_router_load_balancing_type = m.moe_aux_loss_coeff > 0 ? "aux_loss" : "none";
    }
    m.num_attention_heads = cfg.at("num_attention_heads");
    m.num_query_groups = cfg.value("num_key_value_heads", m.num_attention_heads);
    m.num_layers = cfg.at("num_hidden_layers");
    m.vocab_size = cfg.at("vocab_size");
    m.seq_length = cfg.value("max_position_embeddings", int64_t(2048));
    m.norm_epsilon = cfg.value("rms_norm_eps", 1e-6);
    m.rotary_base = cfg.value("rope_theta", 10000.0);
    m.tie_embeddings = cfg.value("tie_word_embeddings", false);
    TESSEL_CHECK(!cfg.value("attention_bias", false), "import-hf: Llama attention biases are not supported");
    for (const auto& [n, t] : hf) {
      // Older exports carry RoPE's inverse frequencies as a buffer, and tied models may repeat the
      // embedding as lm_head: neither is a parameter here.
      if (n.size() >= 19 && n.compare(n.size() - 19, 19, "rotary_emb.inv_freq") == 0) continue;
      if (m.tie_embeddings && n == "lm_head.weight") continue;
      r.tensors.emplace_back(type == "mixtral" ? rename(n, false) : n, t);
    }
  } else if (type == "gpt2") {
    m.arch = "gpt2";
    m.hidden_size = cfg.at("n_embd");
    m.num_attention_heads = cfg.at("n_head");
    m.num_query_groups = m.num_attention_heads;
    m.num_layers = cfg.at("n_layer");
    m.ffn_hidden_size = cfg.contains("n_inner") && !cfg["n_inner"].is_null() ? cfg["n_inner"].get<int64_t>()
                                                                             : 4 * m.hidden_size;
    m.vocab_size = cfg.at("vocab_size");
    m.seq_length = cfg.at("n_positions");
    m.norm_epsilon = cfg.value("layer_norm_epsilon", 1e-5);
    m.tie_embeddings = cfg.value("tie_word_embeddings", true);
    const int64_t D = m.hidden_size;
    auto& o = r.tensors;
    o.emplace_back("model.embed_tokens.weight", take("transformer.wte.weight"));
    o.emplace_back("model.embed_positions.weight", take("transformer.wpe.weight"));
    for (int64_t i = 0; i < m.num_layers; ++i) {
      const std::string t = layer(i), g = gpt_layer(i);
      o.emplace_back(t + "input_layernorm.weight", take(g + "ln_1.weight"));
      o.emplace_back(t + "input_layernorm.bias", take(g + "ln_1.bias"));
      const Tensor qkv = transposed(take(g + "attn.c_attn.weight"));  // [3D, D]
      const Tensor qkv_b = take(g + "attn.c_attn.bias");
      const char* names[3] = {"q_proj", "k_proj", "v_proj"};
      for (int k = 0; k < 3; ++k) {
        o.emplace_back(t + "self_attn." + names[k] + ".weight", rows(qkv, k * D, (k + 1) * D));
        o.emplace_back(t + "self_attn." + names[k] + ".bias", rows(qkv_b, k * D, (k + 1) * D));
      }
      o.emplace_back(t + "self_attn.o_proj.weight", transposed(take(g + "attn.c_proj.weight")));
      o.emplace_back(t + "self_attn.o_proj.bias", take(g + "attn.c_proj.bias"));
      o.emplace_back(t + "post_attention_layernorm.weight", take(g + "ln_2.weight"));
      o.emplace_back(t + "post_attention_layernorm.bias", take(g + "ln_2.bias"));
      o.emplace_back(t + "mlp.up_proj.weight", transposed(take(g + "mlp.c_fc.weight")));
      o.emplace_back(t + "mlp.up_proj.bias", take(g + "mlp.c_fc.bias"));
      o.emplace_back(t + "mlp.down_proj.weight", transposed(take(g + "mlp.c_proj.weight")));
      o.emplace_back(t + "mlp.down_proj.bias", take(g + "mlp.c_proj.bias"));
    }
    o.emplace_back("model.norm.weight", take("transformer.ln_f.weight"));
    o.emplace_back("model.norm.bias", take("transformer.ln_f.bias"));
    if (!m.tie_embeddings) o.emplace_back("lm_head.weight", take("lm_head.weight"));
  } else if (type == "deepseek_v3") {
    import_deepseek_config(cfg, dir, m);
    import_deepseek_tensors(cfg, dir, hf, r);
  } else {
    TESSEL_FAIL("import-hf: model_type '{}' in {}/config.json is not supported (allowed: llama, mixtral, gpt2, "
                "deepseek_v3)",
                type, dir);
  }
  m.validate();
  return r;
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
