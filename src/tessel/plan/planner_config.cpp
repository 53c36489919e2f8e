#include "tessel/plan/planner_config.h"

#include <fmt/format.h>

#include "tessel/ckpt/json_fields.h"
#include "tessel/core/check.h"

namespace tessel::plan {

std::string simumax_model_yaml(const std::string& path, int64_t tensor_parallel) {
  TESSEL_CHECK(tensor_parallel >= 1, "SimuMax model {}: tensor parallel size {} must be >= 1", path, tensor_parallel);
  const nlohmann::json j = ckpt::read_json_file(path, "SimuMax model");
  const ckpt::JsonFields f(j, "SimuMax model " + path);
  constexpr int64_t kBig = int64_t(1) << 40;
  const std::string type = f.string("model_type");
  TESSEL_CHECK(type == "dense" || type == "moe", "{}: model_type '{}': allowed dense, moe", f.where(), type);
  const int64_t hidden = f.integer("hidden_size", 1, kBig), heads = f.integer("head_num", 1, kBig);
  const int64_t head_size = f.integer_or("head_size", hidden / heads, 1, kBig);
  const std::string attention = f.string_or("attention_type", "mha");
  TESSEL_CHECK(attention == "mha" || attention == "mla", "{}: attention_type '{}': allowed mha, mla", f.where(),
               attention);
  const bool mla = attention == "mla";
  TESSEL_CHECK(mla || head_size * heads == hidden,
               "{}: head_size {} x head_num {} != hidden_size {}: tessel's attention has hidden_size / heads per head",
               f.where(), head_size, heads, hidden);
  TESSEL_CHECK(f.boolean_or("use_swiglu", true), "{}: use_swiglu false is not supported (tessel's llama MLP is SwiGLU)",
               f.where());
  const int64_t vocab = f.integer("vocab_size", 1, kBig);
  // Megatron pads to a multiple of 128 x tp (make_vocab_size_divisible_by times the tensor-parallel size).
  const int64_t multiple = 128 * tensor_parallel;
  const int64_t padded = (vocab + multiple - 1) / multiple * multiple;
  std::string arch = "llama";
  if (mla) arch = "deepseek_v3";
  else if (type == "moe") arch = "mixtral";
  std::string y = fmt::format(
      "# from SimuMax model {}\nmodel:\n  arch: {}\n  num_layers: {}\n  hidden_size: {}\n  num_attention_heads: {}\n"
      "  num_query_groups: {}\n  ffn_hidden_size: {}\n  vocab_size: {}\n  seq_length: 4096\n",
      path, arch, f.integer("layer_num", 1, kBig), hidden, heads, f.integer_or("kv_head_num", heads, 1, kBig),
      f.integer("intermediate_size", 1, kBig), padded);
  if (type == "moe") {
    y += fmt::format("  num_experts: {}\n  moe_router_topk: {}\n", f.integer("expert_num", 1, kBig),
                     f.integer("topk", 1, kBig));
    if (f.has("moe_ffn_hidden_size")) y += fmt::format("  moe_ffn_hidden_size: {}\n", f.integer("moe_ffn_hidden_size", 1, kBig));
    if (f.has("moe_shared_expert_intermediate_size"))
      y += fmt::format("  moe_shared_expert_intermediate_size: {}\n",
                       f.integer("moe_shared_expert_intermediate_size", 1, kBig));
    if (f.has("dense_layers")) y += fmt::format("  moe_first_dense_layers: {}\n", f.integer("dense_layers", 0, kBig));
  }
  std::string parallel = "parallel:\n  use_distributed_optimizer: true\n";
  // SimuMax's strategy keeps experts whole on each rank.
  if (type == "moe") parallel += "  expert_tensor_parallel_size: 1\n";
  if (mla) {
    y += fmt::format("  q_lora_rank: {}\n  kv_lora_rank: {}\n  qk_head_dim: {}\n  qk_pos_emb_head_dim: {}\n  v_head_dim: {}\n",
                     f.integer_or("q_lora_rank", 0, 0, kBig), f.integer("kv_lora_rank", 1, kBig),
                     f.integer("qk_head_dim", 1, kBig), f.integer("qk_pos_emb_head_dim", 1, kBig),
                     f.integer("v_head_dim", 1, kBig));
    // DeepSeek-V2 routes by softmax, V3 by sigmoid: the name says which.
    if (f.string_or("model_name", "").find("v3") != std::string::npos) y += "  moe_router_score_function: sigmoid\n";
  }
  // Megatron-LM's bf16 model: the embedding table is a bf16 parameter, looked up in bf16, with its
  // fp32 master sharded like every other (no whole fp32 copy on each rank).
  y += "train:\n  micro_batch_size: 1\n  global_batch_size: 1\nprecision:\n  compute: bf16\n  fp32_embedding: false\n"
       + parallel + "data:\n  path: synthetic:uniform\n";
  return y;
}

train::Config load_plan_config(const std::string& path, const std::vector<std::string>& overrides) {
  if (path.size() > 5 && path.substr(path.size() - 5) == ".json") {
    train::Config cfg = train::Config::from_yaml_text(simumax_model_yaml(path, 1), overrides, path);
    const int64_t tp = cfg.parallel.tensor_model_parallel_size;
    if (tp > 1) {
      // Read again with the vocabulary padded for this tensor-parallel size, and sequence parallelism
      // on unless given: SimuMax's strategy runs it wherever tensor parallelism is on.
      bool sp_given = false;
      for (const std::string& o : overrides) sp_given |= o.rfind("parallel.sequence_parallel=", 0) == 0;
      std::vector<std::string> with_sp = overrides;
      if (!sp_given) with_sp.push_back("parallel.sequence_parallel=true");
      cfg = train::Config::from_yaml_text(simumax_model_yaml(path, tp), with_sp, path);
    }
    return cfg;
  }
  return train::Config::load(path, overrides);
}

}  // namespace tessel::plan
