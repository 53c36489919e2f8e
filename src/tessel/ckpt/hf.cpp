#include "tessel/ckpt/hf.h"

#include <nlohmann/json.hpp>

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
               "with renormalised top-k, no shared expert, no groups, no expert bias)");
}

}  // namespace

void export_hf(const nn::ModelConfig& c, const nn::ParamStore& ps, const std::string& out_dir) {
  fs::create_directories(out_dir);
  auto p = named(ps);
  std::vector<std::pair<std::string, Tensor>> out;
  out.reserve(ps.specs().size() + 8);
  nlohmann::ordered_json cfg;
  TESSEL_CHECK(!c.mla() && c.mtp_num_layers == 0,
               "export-hf: DeepSeek-V3 models (multi-latent attention, multi-token prediction) are not supported yet");
  if (c.is_llama()) {
    const bool moe = c.num_experts > 0;  // Mixtral: Llama plus MoE blocks under their own names
    if (moe) check_mixtral_compatible(c);
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
  write_safetensors((fs::path(out_dir) / "model.safetensors").string(), {{"format", "pt"}}, dense);
  std::ofstream(fs::path(out_dir) / "config.json") << cfg.dump(2) << "\n";
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
  } else {
    TESSEL_FAIL("import-hf: model_type '{}' in {}/config.json is not supported (allowed: llama, mixtral, gpt2)",
                type, dir);
  }
  m.validate();
  return r;
}

}  // namespace tessel::ckpt
