// Config loading: defaults, overrides, and errors that name the key and what is allowed.
#include <gtest/gtest.h>

#include "tessel/core/check.h"
#include "tessel/train/config.h"

using tessel::train::Config;

namespace {

std::string error_of(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  try {
    Config::from_yaml_text(yaml, sets, "test.yaml");
  } catch (const tessel::Error& e) {
    return e.what();
  }
  return "";
}

TEST(Config, ReadsSectionsAndOverrides) {
  const Config c = Config::from_yaml_text(
      "model: {arch: gpt2, num_layers: 3, hidden_size: 32, num_attention_heads: 4, num_query_groups: 4}\n"
      "train: {lr: 0.001, micro_batch_size: 2, global_batch_size: 8}\n"
      "precision: {compute: bf16, fp8: {recipe: none}}\n",
      {"train.lr=5e-4", "model.num_layers=5"});
  EXPECT_EQ(c.model.arch, "gpt2");
  EXPECT_EQ(c.model.num_layers, 5);
  EXPECT_DOUBLE_EQ(c.train.lr, 5e-4);
  EXPECT_EQ(c.grad_accumulation_steps(), 4);
  EXPECT_EQ(c.model.compute, tessel::DType::bf16);
  // The resolved config reads back to the same values.
  const Config again = Config::from_yaml_text(c.to_yaml(), {});
  EXPECT_EQ(again.to_yaml(), c.to_yaml());
}

TEST(Config, UnknownKeyNamesItAndTheAllowedOnes) {
  const std::string e = error_of("model: {num_layerz: 3}\n");
  EXPECT_NE(e.find("model.num_layerz"), std::string::npos) << e;
  EXPECT_NE(e.find("num_layers"), std::string::npos) << e;
  EXPECT_NE(e.find("test.yaml"), std::string::npos) << e;
}

TEST(Config, UnknownSectionAndBadValues) {
  EXPECT_NE(error_of("modle: {}\n").find("unknown config section 'modle'"), std::string::npos);
  EXPECT_NE(error_of("train: {lr: fast}\n").find("train.lr"), std::string::npos);
  EXPECT_NE(error_of("", {"precision.compute=fp16"}).find("allowed: fp32, bf16"), std::string::npos);
  EXPECT_NE(error_of("", {"train.global_batch_size=3", "train.micro_batch_size=2"}).find("multiple"),
            std::string::npos);
  EXPECT_NE(error_of("", {"model.num_attention_heads=3"}).find("divisible"), std::string::npos);
  EXPECT_NE(error_of("", {"nokey"}).find("section.key=value"), std::string::npos);
  // Expert parallelism needs experts it divides; MoE and MLA keys are checked with their names.
  EXPECT_NE(error_of("", {"parallel.expert_model_parallel_size=2"}).find("needs Mixture-of-Experts layers"),
            std::string::npos);
  EXPECT_EQ(error_of("", {"model.arch=mixtral", "model.num_experts=4", "parallel.expert_model_parallel_size=2"}), "");
  EXPECT_EQ(error_of("", {"model.arch=mixtral", "model.num_experts=4", "parallel.expert_model_parallel_size=2",
                          "parallel.use_distributed_optimizer=true"}),
            "");
  EXPECT_NE(error_of("", {"model.arch=mixtral"}).find("needs model.num_experts > 0"), std::string::npos);
  EXPECT_NE(error_of("", {"model.arch=mixtral", "model.num_experts=4", "model.moe_router_topk=5"})
                .find("moe_router_topk must be in [1, num_experts = 4]"),
            std::string::npos);
  EXPECT_EQ(error_of("", {"model.arch=mixtral", "model.num_experts=4", "parallel.tensor_model_parallel_size=2",
                          "parallel.sequence_parallel=true", "model.moe_router_load_balancing_type=seq_aux_loss"}),
            "");
  EXPECT_NE(error_of("", {"model.arch=mixtral", "model.num_experts=4", "parallel.tensor_model_parallel_size=2",
                          "parallel.expert_tensor_parallel_size=4"})
                .find("allowed 1 (experts replicated over tensor parallelism)"),
            std::string::npos);
  EXPECT_NE(error_of("", {"model.arch=mixtral", "model.num_experts=4", "parallel.tensor_model_parallel_size=2",
                          "model.moe_ffn_hidden_size=33"})
                .find("must divide by it"),
            std::string::npos);
  EXPECT_EQ(error_of("", {"model.arch=mixtral", "model.num_experts=4", "parallel.tensor_model_parallel_size=2",
                          "model.moe_ffn_hidden_size=33", "parallel.expert_tensor_parallel_size=1"}),
            "");
  EXPECT_NE(error_of("", {"model.arch=deepseek_v3", "model.qk_pos_emb_head_dim=3"}).find("(even)"), std::string::npos);
  EXPECT_EQ(error_of("", {"model.mtp_num_layers=1", "parallel.context_parallel_size=2"}), "");
  EXPECT_EQ(error_of("", {"parallel.tensor_model_parallel_size=2", "parallel.use_distributed_optimizer=true"}), "");
  EXPECT_EQ(error_of("", {"parallel.tensor_model_parallel_size=2"}), "");
  // Pipeline layouts: an even split, or explicit layers per virtual stage that sum to the model's.
  EXPECT_EQ(error_of("", {"parallel.pipeline_model_parallel_size=2", "model.num_layers=4"}), "");
  EXPECT_NE(error_of("", {"parallel.pipeline_model_parallel_size=3", "model.num_layers=4"})
                .find("does not split evenly over 3 pipeline stages"),
            std::string::npos);
  EXPECT_EQ(error_of("", {"parallel.pipeline_model_parallel_size=2", "model.num_layers=4",
                          "parallel.pipeline_layers_per_stage=3,1"}),
            "");
  EXPECT_NE(error_of("", {"parallel.pipeline_model_parallel_size=2", "model.num_layers=4",
                          "parallel.pipeline_layers_per_stage=3,x"})
                .find("comma-separated list"),
            std::string::npos);
  EXPECT_NE(error_of("", {"parallel.pipeline_model_parallel_size=2", "model.num_layers=4",
                          "parallel.pipeline_layers_per_stage=4,0"})
                .find("at least 1 layer"),
            std::string::npos);
  EXPECT_NE(error_of("", {"parallel.virtual_pipeline_model_parallel_size=2"}).find("needs pipeline_model_parallel_size"),
            std::string::npos);
  EXPECT_NE(error_of("", {"parallel.pipeline_schedule=gpipe"}).find("allowed: 1f1b, interleaved"), std::string::npos);
  EXPECT_NE(error_of("", {"parallel.sequence_parallel=true"}).find("needs tensor_model_parallel_size > 1"),
            std::string::npos);
  // FP8 recipes and their keys.
  for (const char* r : {"delayed", "current", "block"})
    EXPECT_EQ(error_of("", {std::string("precision.fp8.recipe=") + r}), "") << r;
  EXPECT_NE(error_of("", {"precision.fp8.recipe=mxfp8"}).find("allowed: none, delayed, current, block"),
            std::string::npos);
  EXPECT_NE(error_of("", {"precision.fp8.recipe=delayed", "precision.fp8.format=e5m2"}).find("allowed: e4m3, hybrid"),
            std::string::npos);
  EXPECT_NE(error_of("", {"precision.fp8.recipe=delayed", "precision.fp8.amax_compute_algo=mean"})
                .find("allowed: max, most_recent"),
            std::string::npos);
  EXPECT_NE(error_of("", {"precision.fp8.recipe=delayed", "precision.fp8.amax_history_len=0"}).find("must be >= 1"),
            std::string::npos);
  EXPECT_NE(error_of("model: [1, 2]\n").find("mapping"), std::string::npos);
}

}  // namespace
