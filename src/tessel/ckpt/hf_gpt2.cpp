// Hugging Face GPT-2 (GPT2LMHeadModel): transformer.* names, Conv1D weights stored [in, out], and
// q, k, v fused into c_attn.
#include <algorithm>

#include "tessel/ckpt/hf_common.h"

namespace tessel::ckpt::hf {

void parse_gpt2_config(const JsonFields& cfg, HfConfig& out) {
  nn::ModelConfig& m = out.model;
  m.arch = "gpt2";
  m.hidden_size = cfg.integer("n_embd", 1, kMaxHfSize);
  m.num_attention_heads = cfg.integer("n_head", 1, kMaxHfSize);
  m.num_query_groups = m.num_attention_heads;
  m.num_layers = cfg.integer("n_layer", 1, kMaxHfSize);
  m.ffn_hidden_size = cfg.integer_or("n_inner", 4 * m.hidden_size, 1, kMaxHfSize);  // null: 4 x n_embd
  m.vocab_size = cfg.integer("vocab_size", 1, kMaxHfSize);
  m.seq_length = cfg.integer("n_positions", 1, kMaxHfSize);
  m.norm_epsilon = cfg.number_or("layer_norm_epsilon", 1e-5, 0, 1, true);
  m.tie_embeddings = cfg.boolean_or("tie_word_embeddings", true);
  // tessel's GeLU is the tanh approximation, which these names compute (gelu_fast is its algebraic
  // rewrite); "gelu" (erf) and others are another function.
  const std::string act = cfg.string_or("activation_function", "gelu_new");
  const std::vector<std::string> tanh_gelu = {"gelu_new", "gelu_pytorch_tanh", "gelu_fast"};
  TESSEL_CHECK(std::find(tanh_gelu.begin(), tanh_gelu.end(), act) != tanh_gelu.end(),
               "{}: activation_function '{}' is not supported (tessel's GPT-2 MLP computes the tanh GeLU: gelu_new, "
               "gelu_pytorch_tanh or gelu_fast)", cfg.where(), act);
  require_value(cfg, "scale_attn_weights", true, "tessel scales attention scores by 1/sqrt(head size)");
  require_value(cfg, "scale_attn_by_inverse_layer_idx", false, "tessel does not scale scores by layer");
  require_value(cfg, "add_cross_attention", false, "tessel's decoder has no cross-attention");
  for (const char* key : {"resid_pdrop", "embd_pdrop", "attn_pdrop"})
    warn_unless_zero(cfg, key, "tessel trains without dropout", out);
}

void export_gpt2(const nn::ModelConfig& c, const nn::ParamStore& ps, NamedTensors& out, nlohmann::ordered_json& cfg) {
  TESSEL_CHECK(c.num_query_groups == c.num_attention_heads,
               "export-hf: GPT-2 naming has no grouped-query attention (num_query_groups {} != heads {})",
               c.num_query_groups, c.num_attention_heads);
  auto p = named(ps);
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

// Every tensor is read with the shape the config implies (the splits and transposes need it).
void import_gpt2_tensors(const HfTensors& hf, HfImport& r) {
  const nn::ModelConfig& m = r.model;
  const int64_t D = m.hidden_size, F = m.ffn_hidden_size;
  auto& o = r.tensors;
  o.emplace_back("model.embed_tokens.weight", hf.at("transformer.wte.weight", {m.vocab_size, D}));
  o.emplace_back("model.embed_positions.weight", hf.at("transformer.wpe.weight", {m.seq_length, D}));
  for (int64_t i = 0; i < m.num_layers; ++i) {
    const std::string t = layer(i), g = gpt_layer(i);
    o.emplace_back(t + "input_layernorm.weight", hf.at(g + "ln_1.weight", {D}));
    o.emplace_back(t + "input_layernorm.bias", hf.at(g + "ln_1.bias", {D}));
    const Tensor qkv = transposed(hf.at(g + "attn.c_attn.weight", {D, 3 * D}));  // [3D, D]
    const Tensor& qkv_b = hf.at(g + "attn.c_attn.bias", {3 * D});
    const char* names[3] = {"q_proj", "k_proj", "v_proj"};
    for (int k = 0; k < 3; ++k) {
      o.emplace_back(t + "self_attn." + names[k] + ".weight", rows(qkv, k * D, (k + 1) * D));
      o.emplace_back(t + "self_attn." + names[k] + ".bias", rows(qkv_b, k * D, (k + 1) * D));
    }
    o.emplace_back(t + "self_attn.o_proj.weight", transposed(hf.at(g + "attn.c_proj.weight", {D, D})));
    o.emplace_back(t + "self_attn.o_proj.bias", hf.at(g + "attn.c_proj.bias", {D}));
    o.emplace_back(t + "post_attention_layernorm.weight", hf.at(g + "ln_2.weight", {D}));
    o.emplace_back(t + "post_attention_layernorm.bias", hf.at(g + "ln_2.bias", {D}));
    o.emplace_back(t + "mlp.up_proj.weight", transposed(hf.at(g + "mlp.c_fc.weight", {D, F})));
    o.emplace_back(t + "mlp.up_proj.bias", hf.at(g + "mlp.c_fc.bias", {F}));
    o.emplace_back(t + "mlp.down_proj.weight", transposed(hf.at(g + "mlp.c_proj.weight", {F, D})));
    o.emplace_back(t + "mlp.down_proj.bias", hf.at(g + "mlp.c_proj.bias", {D}));
  }
  o.emplace_back("model.norm.weight", hf.at("transformer.ln_f.weight", {D}));
  o.emplace_back("model.norm.bias", hf.at("transformer.ln_f.bias", {D}));
  if (!m.tie_embeddings) o.emplace_back("lm_head.weight", hf.at("lm_head.weight", {m.vocab_size, D}));
}

}  // namespace tessel::ckpt::hf
