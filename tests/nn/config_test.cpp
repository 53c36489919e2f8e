// Config loading: defaults, overrides, and errors that name the key and what is allowed.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "support/scratch_dir.h"
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
  // An odd sequence length: refused only where context parallelism cuts the sequence in 2 x cp chunks.
  EXPECT_EQ(error_of("", {"model.seq_length=255"}), "");
  // ... and where sequence parallelism splits a micro-batch's tokens over the tensor-parallel ranks.
  EXPECT_NE(error_of("", {"model.seq_length=255", "train.micro_batch_size=1", "train.global_batch_size=1",
                          "parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true"})
                .find("parallel.sequence_parallel: 255 tokens per micro-batch and rank"),
            std::string::npos);
  EXPECT_EQ(error_of("", {"model.seq_length=255", "train.micro_batch_size=2", "train.global_batch_size=2",
                          "parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true"}),
            "");
  EXPECT_NE(error_of("", {"model.seq_length=255", "parallel.context_parallel_size=2"})
                .find("model.seq_length 255 must be divisible by 2 x parallel.context_parallel_size = 4"),
            std::string::npos);
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
  EXPECT_NE(error_of("", {"parallel.pipeline_schedule=gpipe"})
                .find("allowed: 1f1b, interleaved, zb-h1, zb-h2, zb-v, dualpipe, dualpipev"),
            std::string::npos);
  // The zero-bubble, V and DualPipe schedules fix their chunks per rank; DualPipe needs an even pipeline.
  for (const char* kind : {"zb-h1", "zb-h2", "zb-v", "dualpipev"})
    EXPECT_EQ(error_of("", {"parallel.pipeline_model_parallel_size=2", "model.num_layers=4",
                            std::string("parallel.pipeline_schedule=") + kind}),
              "")
        << kind;
  EXPECT_NE(error_of("", {"parallel.pipeline_model_parallel_size=2", "model.num_layers=4",
                          "parallel.virtual_pipeline_model_parallel_size=2", "parallel.pipeline_schedule=zb-v"})
                .find("parallel.pipeline_schedule zb-v sets its own chunks per rank (2)"),
            std::string::npos);
  EXPECT_NE(error_of("", {"parallel.pipeline_model_parallel_size=2", "model.num_layers=3",
                          "parallel.pipeline_schedule=zb-v"})
                .find("does not split evenly over 4 pipeline stages"),
            std::string::npos);
  EXPECT_EQ(error_of("", {"parallel.pipeline_model_parallel_size=2", "model.num_layers=4",
                          "parallel.pipeline_schedule=dualpipe"}),
            "");  // 2 stages, each held by both ranks
  EXPECT_NE(error_of("", {"parallel.pipeline_model_parallel_size=3", "model.num_layers=6",
                          "parallel.pipeline_schedule=dualpipe"})
                .find("dualpipe needs an even pipeline_model_parallel_size, got 3"),
            std::string::npos);
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

// The text of the error a config raises, or "" when it loads; `seconds` is how long it took.
std::string timed_error_of(const std::string& yaml, const std::vector<std::string>& sets, double* seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string e = error_of(yaml, sets);
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return e;
}

#define EXPECT_CONTAINS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

TEST(ConfigInput, IntegersMustBeIntegersThatFit) {
  EXPECT_CONTAINS(error_of("model: {hidden_size: 32.5}\n"), "model.hidden_size: '32.5' is not an integer");
  EXPECT_CONTAINS(error_of("", {"model.num_layers=1e-3"}), "model.num_layers: '1e-3' is not an integer");
  EXPECT_CONTAINS(error_of("", {"train.train_iters=99999999999999999999"}),
                  "train.train_iters: '99999999999999999999' is out of range for an integer");
  EXPECT_CONTAINS(error_of("", {"train.seed=abc"}), "train.seed: 'abc' is not an integer");
  // A whole number written as a float is exact, and YAML's integer forms still read.
  const Config c = Config::from_yaml_text("model: {hidden_size: 128.0}\nparallel: {ddp_bucket_size: 4e6}\n",
                                          {"train.seed=0x10"});
  EXPECT_EQ(c.model.hidden_size, 128);
  EXPECT_EQ(c.parallel.ddp_bucket_size, 4000000);
  EXPECT_EQ(c.train.seed, 16);
}

TEST(ConfigInput, NumbersMustBeFinite) {
  EXPECT_CONTAINS(error_of("train: {lr: .inf}\n"), "train.lr: '.inf' is not a finite number");
  EXPECT_CONTAINS(error_of("", {"train.clip_grad=.nan"}), "train.clip_grad: '.nan' is not a finite number");
  EXPECT_CONTAINS(error_of("", {"model.norm_epsilon=small"}), "model.norm_epsilon: 'small' is not a number");
  EXPECT_CONTAINS(error_of("", {"model.tie_embeddings=2"}), "model.tie_embeddings: '2' is not a boolean (true/false)");
}

TEST(ConfigInput, DuplicateKeysAreRefusedWithTheirLines) {
  EXPECT_CONTAINS(error_of("model:\n  hidden_size: 32\n  num_layers: 2\n  hidden_size: 64\n"),
                  "test.yaml: line 4: duplicate key 'model.hidden_size' (first at line 2");
  EXPECT_CONTAINS(error_of("train: {lr: 0.1}\nmodel: {num_layers: 2}\ntrain: {seed: 2}\n"),
                  "test.yaml: line 3: duplicate key 'train' (first at line 1");
  // The nested and the dotted spelling of one key are the same key.
  EXPECT_CONTAINS(error_of("precision:\n  fp8: {recipe: delayed}\n  fp8.recipe: current\n"),
                  "test.yaml: line 3: duplicate key 'precision.fp8.recipe' (first at line 2");
  // --set overrides the file's value: not a duplicate.
  EXPECT_EQ(error_of("model: {num_layers: 2}\n", {"model.num_layers=3"}), "");
}

TEST(ConfigInput, DeepNestingIsNamedNotALibraryMessage) {
  const std::string deep = "model: " + std::string(200000, '[') + std::string(200000, ']') + "\n";
  const std::string e = error_of(deep);
  EXPECT_CONTAINS(e, "test.yaml: line 1: YAML nested more than 500 levels deep");
  EXPECT_EQ(e.find("bad file"), std::string::npos) << e;
  EXPECT_CONTAINS(error_of("", {"model.arch=" + std::string(100000, '{')}), "--set model.arch: line 1: YAML nested");
  // Maps where a value belongs: under a known key, and under an unknown one.
  EXPECT_CONTAINS(error_of("model: {hidden_size: {a: 1}}\n"), "'model.hidden_size' must be a single value");
  EXPECT_CONTAINS(error_of("model: {a: {a: {a: 1}}}\n"), "unknown key 'model.a'");
}

TEST(ConfigInput, ModelSizesAreBoundedAndRefusedAtOnce) {
  double seconds = 0;
  EXPECT_CONTAINS(timed_error_of("", {"model.num_layers=4294967297"}, &seconds),
                  "model.num_layers must be in [1, 1024], got 4294967297");
  EXPECT_LT(seconds, 1.0);
  EXPECT_CONTAINS(error_of("", {"model.hidden_size=131073", "model.num_attention_heads=1", "model.num_query_groups=1"}),
                  "model.hidden_size must be in [1, 131072], got 131073");
  EXPECT_CONTAINS(error_of("", {"model.vocab_size=4194305"}), "model.vocab_size must be in [1, 4194304], got 4194305");
  EXPECT_CONTAINS(error_of("", {"model.seq_length=16777218"}),
                  "model.seq_length must be in [1, 16777216], got 16777218");
  EXPECT_CONTAINS(error_of("", {"model.ffn_hidden_size=0"}), "model.ffn_hidden_size must be in [1, 1048576], got 0");
  EXPECT_CONTAINS(error_of("", {"model.num_attention_heads=2048"}),
                  "model.num_attention_heads must be in [1, 1024], got 2048");
  EXPECT_CONTAINS(error_of("", {"model.arch=mixtral", "model.num_experts=5000"}),
                  "model.num_experts must be in [0, 4096], got 5000");
  EXPECT_CONTAINS(error_of("", {"model.mtp_num_layers=-1"}), "model.mtp_num_layers must be in [0, 1024], got -1");
  EXPECT_CONTAINS(error_of("", {"model.arch=deepseek_v3", "model.kv_lora_rank=200000"}),
                  "model.kv_lora_rank must be in [0, 131072], got 200000");
  EXPECT_CONTAINS(error_of("", {"model.init_method_std=-0.02"}), "model.init_method_std must be >= 0, got -0.02");
  // A negative seed stays valid: checkpoints store it as its 64-bit pattern (-1 as 2^64 - 1) and
  // compare it the same way, and configs of runs that used one must still load.
  EXPECT_EQ(Config::from_yaml_text("", {"train.seed=-1"}).train.seed, -1);
  EXPECT_CONTAINS(error_of("", {"model.arch=mixtral", "model.num_experts=4", "model.moe_aux_loss_coeff=-1"}),
                  "model.moe_aux_loss_coeff must be >= 0, got -1");
  EXPECT_CONTAINS(error_of("", {"model.arch=mixtral", "model.num_experts=4", "model.moe_router_topk_scaling_factor=0"}),
                  "model.moe_router_topk_scaling_factor must be > 0, got 0");
  EXPECT_CONTAINS(error_of("", {"parallel.pipeline_model_parallel_size=4294967297"}),
                  "parallel.pipeline_model_parallel_size must be in [1, 1048576], got 4294967297");
  EXPECT_CONTAINS(error_of("", {"precision.fp8.recipe=delayed", "precision.fp8.amax_history_len=16385"}),
                  "precision.fp8.amax_history_len must be in [1, 16384], got 16385");
}

TEST(ConfigInput, TrainingKeysOutOfRange) {
  EXPECT_CONTAINS(error_of("train: {clip_grad: -1}\n"), "train.clip_grad must be >= 0 (0: no clipping), got -1");
  EXPECT_EQ(error_of("train: {clip_grad: 0}\n"), "");
  EXPECT_CONTAINS(error_of("", {"train.eval_interval=-1"}), "train.eval_interval must be >= 0, got -1");
  EXPECT_CONTAINS(error_of("", {"train.eval_interval=5"}),
                  "train.eval_iters must be >= 1 when train.eval_interval is set (5), got 0");
  EXPECT_CONTAINS(error_of("", {"train.lr_wsd_decay_iters=-1"}), "train.lr_wsd_decay_iters must be >= 0, got -1");
  EXPECT_CONTAINS(error_of("", {"train.lr_warmup_iters=-1"}), "train.lr_warmup_iters must be >= 0, got -1");
  EXPECT_CONTAINS(error_of("", {"train.lr=-0.1"}), "train.lr must be >= 0, got -0.1");
}

TEST(ConfigInput, WarmUpLongerThanTheRunIsAcceptedWithAWarning) {
  const Config c = Config::from_yaml_text("train: {lr_warmup_iters: 20}\n", {"train.train_iters=5"});
  ASSERT_EQ(c.warnings().size(), 1u);
  EXPECT_CONTAINS(c.warnings()[0], "train.lr_warmup_iters (20) is longer than train.train_iters (5)");
  EXPECT_TRUE(Config::from_yaml_text("train: {lr_warmup_iters: 5, train_iters: 5}\n", {}).warnings().empty());
}

// Settings that parse but do nothing in the run they are in (a probe, 2026-12-04): each is said.
TEST(ConfigInput, SettingsThatDoNothingHereAreSaid) {
  const auto only_warning = [](const std::vector<std::string>& sets) {
    const std::vector<std::string> w = Config::from_yaml_text("", sets).warnings();
    EXPECT_EQ(w.size(), 1u) << fmt::format("{}", fmt::join(sets, " "));
    return w.empty() ? std::string() : w[0];
  };
  EXPECT_CONTAINS(only_warning({"checkpoint.interval=1"}),
                  "checkpoint.interval (1) has no effect without checkpoint.dir: nothing is saved");
  EXPECT_CONTAINS(only_warning({"checkpoint.async_save=true"}),
                  "checkpoint.async_save / checkpoint.distributed have no effect without checkpoint.dir");
  EXPECT_CONTAINS(only_warning({"train.exit_interval=1"}),
                  "train.exit_interval (1) stops the run without checkpoint.dir: nothing is saved");
  EXPECT_TRUE(Config::from_yaml_text("", {"train.exit_interval=1", "checkpoint.dir=ck", "checkpoint.interval=1"})
                  .warnings()
                  .empty());
  EXPECT_CONTAINS(only_warning({"model.num_layers=2", "precision.compute=bf16", "precision.fp8.recipe=delayed",
                                "precision.fp8.first_last_layers_bf16=true"}),
                  "precision.fp8.recipe=delayed: num_layers_at_start_in_bf16 (1) + num_layers_at_end_in_bf16 (1) "
                  "cover all 2 layers (precision.fp8.first_last_layers_bf16): no layer computes in FP8");
  EXPECT_TRUE(Config::from_yaml_text("", {"model.num_layers=3", "precision.compute=bf16", "precision.fp8.recipe=delayed",
                                          "precision.fp8.first_last_layers_bf16=true"})
                  .warnings()
                  .empty());
  EXPECT_CONTAINS(only_warning({"train.lr_decay_style=wsd", "train.lr_warmup_iters=0"}),
                  "train.lr_decay_style=wsd with train.lr_wsd_decay_iters 0: the learning rate never decays");
  EXPECT_CONTAINS(only_warning({"train.lr_decay_style=wsd", "train.train_iters=10", "train.lr_warmup_iters=4",
                                "train.lr_wsd_decay_iters=7"}),
                  "train.lr_wsd_decay_iters (7) is longer than the 6 steps after warm-up");
  EXPECT_CONTAINS(only_warning({"parallel.overlap_moe_expert_parallel_comm=true"}),
                  "parallel.overlap_moe_expert_parallel_comm has no effect here: it overlaps the expert all-to-alls "
                  "inside the F&B pairs of parallel.pipeline_schedule dualpipe or dualpipev");
  EXPECT_CONTAINS(only_warning({"train.lr=0"}), "train.lr is 0: the weights do not change");
  EXPECT_CONTAINS(only_warning({"train.eval_iters=5"}),
                  "train.eval_iters (5) has no effect with train.eval_interval 0: nothing is evaluated");
  EXPECT_CONTAINS(only_warning({"train.train_iters=20", "train.lr_warmup_iters=0", "resilience.loss_spike_zscore=3",
                                "resilience.spike_window=20"}),
                  "resilience.spike_window (20) is not shorter than train.train_iters (20): the spike detectors never "
                  "fill their window and never fire");
  EXPECT_TRUE(Config::from_yaml_text("", {"train.train_iters=21", "train.lr_warmup_iters=0",
                                          "resilience.loss_spike_zscore=3", "resilience.spike_window=20"})
                  .warnings()
                  .empty());
}

// Megatron-LM accepts a dataset named twice in a blend, and so does tessel; but each part draws its
// own shuffle of the same documents, which is rarely what was meant, so it is said.
TEST(ConfigInput, ADatasetNamedTwiceInABlendIsSaid) {
  const auto warnings_for = [](const std::string& path) {
    return Config::from_yaml_text("", {"data.path=" + path}).warnings();
  };
  const std::vector<std::string> w = warnings_for("0.3 data/web 0.5 data/code 0.2 ./data/web");
  ASSERT_EQ(w.size(), 1u);
  EXPECT_CONTAINS(w[0], "data.path names the dataset 'data/web' 2 times (weights 0.3, 0.2): each part shuffles the "
                        "same documents on its own");
  EXPECT_CONTAINS(w[0], "name it once with weight 0.5");
  EXPECT_TRUE(warnings_for("0.3 data/web 0.7 data/code").empty());
  EXPECT_TRUE(warnings_for("data/web").empty());
  EXPECT_TRUE(warnings_for("0.3 data/web 0.7").empty());  // malformed: refused when the data is opened
}

TEST(ConfigInput, TokenizerDirectoryIsNamed) {
  tessel::testing::ScratchDir d;
  EXPECT_CONTAINS(error_of("", {"data.tokenizer=" + d.dir}),
                  "data.tokenizer '" + d.dir + "' is a directory; it should be a SentencePiece .model file");
}

TEST(ConfigInput, EmptyConfigFileOrOneWithoutAModelIsRefused) {
  tessel::testing::ScratchDir d;
  auto load_error = [](const std::string& path) {
    try {
      Config::load(path, {});
    } catch (const tessel::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  std::ofstream(d / "empty.yaml") << "";
  std::ofstream(d / "comments.yaml") << "# nothing yet\n";
  std::ofstream(d / "nomodel.yaml") << "train: {train_iters: 3}\n";
  std::ofstream(d / "emptymodel.yaml") << "model:\ntrain: {train_iters: 3}\n";
  std::ofstream(d / "ok.yaml") << "model: {num_layers: 1}\n";
  EXPECT_CONTAINS(load_error(d / "empty.yaml"), "config file '" + (d / "empty.yaml") + "' is empty");
  EXPECT_CONTAINS(load_error(d / "comments.yaml"), "is empty");
  EXPECT_CONTAINS(load_error(d / "nomodel.yaml"), "config file '" + (d / "nomodel.yaml") + "' has no model section");
  EXPECT_CONTAINS(load_error(d / "emptymodel.yaml"), "has no model section");
  EXPECT_CONTAINS(load_error(d.dir), "config file '" + d.dir + "' is a directory, not a YAML file");
  EXPECT_EQ(load_error(d / "ok.yaml"), "");
  EXPECT_EQ(Config::load("", {}).model.num_layers, 2);  // no file at all: the built-in defaults
}

TEST(ConfigInput, EveryShippedConfigLoads) {
  // The planning configs included: deepseek-v3.yaml once failed here (61 layers on 16 stages without
  // pipeline_layers_per_stage).
  int loaded = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(std::string(TESSEL_FIXTURE_DIR) + "/../../configs"))
    if (e.path().extension() == ".yaml") {
      EXPECT_NO_THROW(Config::load(e.path().string(), {})) << e.path();
      ++loaded;
    }
  EXPECT_GE(loaded, 11);
}

TEST(ConfigInput, ErrorMessagesCarryNoSourceLocation) {
  try {
    Config::from_yaml_text("model: {num_layerz: 3}\n", {}, "test.yaml");
    FAIL() << "accepted";
  } catch (const tessel::Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("test.yaml: unknown key", 0), 0u) << e.what();
    EXPECT_CONTAINS(e.where(), "src/tessel/train/config.cpp:");
  }
}

}  // namespace

TEST(ConfigInput, TextValuesAreOneLine) {
  // A line break in a string value cannot be written back into the resolved config as it was read.
  EXPECT_CONTAINS(error_of("data: {path: \"synthetic:markov\\n\"}\n"),
                  "data.path must be one line of text; it holds a control character (code 10) at position 16");
  EXPECT_CONTAINS(error_of("log: {dir: \"runs/a\\tb\"}\n"), "log.dir must be one line of text");
  EXPECT_EQ(error_of("data: {path: \"synthetic:markov\"}\n"), "");
}

TEST(ConfigInput, TextValuesAreUtf8) {
  // Found by fuzzing: C0 80 (an overlong NUL) was accepted, and the resolved config.yaml the emitter
  // wrote from it read back with a real NUL, which the next load refused.
  EXPECT_CONTAINS(error_of("checkpoint:\n  dir: \"runs/\xC0\x80\"\n"),
                  "checkpoint.dir must be UTF-8 text; the byte 0xC0 at position 5 does not begin a well-formed "
                  "sequence");
  EXPECT_EQ(error_of("checkpoint:\n  dir: \"runs/\xC3\xA9t\xC3\xA9\"\n"), "");  // "runs/été"
}

TEST(ConfigInput, SkippedIterationRanges) {
  const Config c = Config::from_yaml_text("", {"train.skip_train_iteration_range=4-5, 9 12-12"});
  using R = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(c.train.skipped_iterations(), (R{{4, 5}, {9, 9}, {12, 12}}));
  for (int64_t i : {4, 5, 9, 12}) EXPECT_TRUE(c.train.skips_iteration(i)) << i;
  for (int64_t i : {3, 6, 8, 10, 13}) EXPECT_FALSE(c.train.skips_iteration(i)) << i;
  EXPECT_CONTAINS(error_of("", {"train.skip_train_iteration_range=5-4"}),
                  "train.skip_train_iteration_range: '5-4' must be iterations >= 1, first <= last");
  EXPECT_CONTAINS(error_of("", {"train.skip_train_iteration_range=0"}), "'0' must be iterations >= 1");
  EXPECT_CONTAINS(error_of("", {"train.skip_train_iteration_range=a-b"}),
                  "'a-b' is not an iteration or a range A-B of iterations");
}

TEST(ConfigInput, ResilienceKeysOutOfRange) {
  EXPECT_EQ(error_of("resilience: {snapshot_interval: 5, loss_spike_zscore: 6, max_rewinds: 0}\n"), "");
  EXPECT_CONTAINS(error_of("", {"resilience.spike_window=1"}), "resilience.spike_window must be >= 2 steps, got 1");
  EXPECT_CONTAINS(error_of("", {"resilience.rewind_lr_scale=1.5"}), "resilience.rewind_lr_scale must be in (0, 1], got 1.5");
  EXPECT_CONTAINS(error_of("", {"resilience.loss_spike_zscore=-1"}), "resilience.loss_spike_zscore and");
  EXPECT_CONTAINS(error_of("", {"resilience.collective_timeout_s=-1"}),
                  "resilience.collective_timeout_s must be 0 (no timeout) or >= 1 second, got -1");
  EXPECT_CONTAINS(error_of("", {"resilience.collective_timeout_s=0.01"}), "or >= 1 second, got 0.01");
  EXPECT_CONTAINS(error_of("", {"resilience.snapshot_interval=-2"}), "resilience.snapshot_interval must be >= 0, got -2");
  EXPECT_CONTAINS(error_of("", {"resilience.bogus=1"}), "unknown key 'resilience.bogus' (allowed in 'resilience': "
                                                        "collective_timeout_s, detect_nonfinite");
}
