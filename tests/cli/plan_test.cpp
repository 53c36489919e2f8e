// tessel plan end to end: calibrate writes a profile that estimate reads; estimate's report and JSON
// last line; a SimuMax-style model JSON as the config; the refusals (a stage over the memory limit,
// a layout that cannot exist, a profile without the network level a group needs).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "cli/cli_support.h"

using namespace tessel::testing;

namespace {

std::string profile() { return config("hardware/cpu-2core-1thread-2ranks.json"); }

TEST(PlanCli, EstimateReportsEveryStageAndEndsInJson) {
  TempDir d;
  const auto r = run_tessel("plan estimate " + config("bench/llama-tiny.yaml") + " --hardware " + profile() +
                                " --world 2 --set parallel.pipeline_model_parallel_size=2 --set train.global_batch_size=16"
                                " --set train.micro_batch_size=2 --ops",
                            d.path(), 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("pipeline stage 1 of 2 (1 ranks): step"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("kernels by op family (per step):"), std::string::npos) << r.output;
  const auto j = nlohmann::json::parse(last_line(r.output));
  for (const char* key : {"step_ms", "peak_memory_gib", "tokens_per_s", "mfu"}) EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_GT(j["step_ms"].get<double>(), 0);
  ASSERT_EQ(j["stages"].size(), 2u);
  EXPECT_GT(j["stages"][1]["bubble_ms"].get<double>(), 0);
  EXPECT_NEAR(j["tokens_per_s"].get<double>(), 16 * 256 / (j["step_ms"].get<double>() / 1e3), 1e-6 * j["tokens_per_s"].get<double>());
}

TEST(PlanCli, SimuMaxModelJsonIsAConfigAndTooLittleMemoryExitsOne) {
  TempDir d;
  {
    std::ofstream m(d.path() + "/tiny_llama.json");
    m << R"({"model_type": "dense", "model_name": "tiny", "hidden_size": 256, "head_num": 4, "kv_head_num": 2,
             "head_size": 64, "intermediate_size": 512, "layer_num": 2, "vocab_size": 1000, "use_swiglu": true})";
  }
  const auto r = run_tessel("plan estimate tiny_llama.json --hardware " + profile() +
                                " --world 2 --set model.seq_length=128 --set parallel.tensor_model_parallel_size=2"
                                " --memory-gib 0.001",
                            d.path(), 120);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("does not fit: pipeline stage 0 of 1: peak"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("exceeds 0.00 GiB per device (--memory-gib)"), std::string::npos) << r.output;
  const auto j = nlohmann::json::parse(last_line(r.output));
  EXPECT_FALSE(j["fits"].get<bool>());
  // bf16, sequence parallelism with tp 2, the vocabulary padded to 1024: tp and its collectives ran.
  EXPECT_GT(j["stages"][0]["exposed_comm_ms"]["tp"].get<double>(), 0);
  // An attention type SimuMax does not have was read as standard attention.
  {
    std::ofstream m(d.path() + "/tiny_gqa.json");
    m << R"({"model_type": "dense", "hidden_size": 256, "head_num": 4, "attention_type": "gqa",
             "intermediate_size": 512, "layer_num": 2, "vocab_size": 1000})";
  }
  const auto bad = run_tessel("plan estimate tiny_gqa.json --hardware " + profile() + " --world 1", d.path(), 60);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("tiny_gqa.json: attention_type 'gqa': allowed mha, mla"), std::string::npos) << bad.output;
}

TEST(PlanCli, ImpossibleLayoutAndMissingNetworkLevelAreNamed) {
  TempDir d;
  auto r = run_tessel("plan estimate " + config("bench/llama-tiny.yaml") + " --hardware " + profile() +
                          " --world 3 --set parallel.tensor_model_parallel_size=2",
                      d.path(), 60);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("world size 3 is not divisible by tensor_model_parallel_size 2"), std::string::npos) << r.output;
  // The cpu profile's node is 2 ranks: 4 data-parallel ranks span two of them.
  r = run_tessel("plan estimate " + config("bench/llama-tiny.yaml") + " --hardware " + profile() + " --world 4 --set train.global_batch_size=32",
                 d.path(), 60);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("has no 'inter_node' network level, and the dp group spans 4 ranks (nodes of 2)"),
            std::string::npos)
      << r.output;
  r = run_tessel("plan estimate " + config("bench/llama-tiny.yaml") + " --hardware missing.json --world 1", d.path(), 60);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("hardware profile missing.json does not exist"), std::string::npos) << r.output;
}

TEST(PlanCli, CalibrateWritesAProfileEstimateReads) {
  TempDir d;
  auto r = run_tessel("plan calibrate --out cal.json --repeats 1", d.path(), 240);
  const char* device = std::getenv("TESSEL_DEVICE");
  if (device && std::string(device) == "cpu-strict") {  // the strict.cli run of this suite
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("TESSEL_DEVICE=cpu-strict adds its own cost to every kernel call"), std::string::npos) << r.output;
    return;
  }
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("no collectives (run under mpirun -np 2 to measure them)"), std::string::npos) << r.output;
  r = run_tessel("plan estimate " + config("bench/llama-tiny.yaml") + " --hardware cal.json --world 1", d.path(), 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_GT(nlohmann::json::parse(last_line(r.output))["step_ms"].get<double>(), 0);
  // FP8: the emulated FP8 GEMM over the grid (3 sizes cubed x 3 variants) and the quantisation
  // kernels of both scalings, so an FP8 layout is estimated with measured entries.
  std::ifstream in(d.path() + "/cal.json");
  const nlohmann::json profile = nlohmann::json::parse(in);
  // The host's time per kernel call, measured in the calibration models' steps: some, and less than
  // a millisecond (this machine: about 12 us).
  EXPECT_GT(profile.at("host_us_per_kernel").get<double>(), 0.0);
  EXPECT_LT(profile.at("host_us_per_kernel").get<double>(), 1000.0);
  ASSERT_TRUE(profile["compute"].contains("fp8_gemm")) << profile["compute"].dump();
  EXPECT_EQ(profile["compute"]["fp8_gemm"]["points"].size(), 81u);
  for (const char* family : {"fp8_quantize", "fp8_quantize_row_tiles", "fp8_quantize_blocks"})
    EXPECT_TRUE(profile["memory"]["efficiency"].contains(family)) << family;
  for (const char* recipe : {"delayed", "block"}) {
    r = run_tessel("plan estimate " + config("bench/llama-tiny.yaml") +
                       " --hardware cal.json --world 1 --set precision.compute=bf16 --set precision.fp8.recipe=" + recipe,
                   d.path(), 60);
    ASSERT_EQ(r.exit_code, 0) << recipe << ": " << r.output;
    EXPECT_GT(nlohmann::json::parse(last_line(r.output))["step_ms"].get<double>(), 0) << recipe;
  }
}

}  // namespace

namespace {

TEST(PlanCli, SearchRanksTheLayoutsAndSaysWhenNoneFits) {
  TempDir d;
  auto r = run_tessel("plan search " + config("bench/llama-tiny.yaml") + " --hardware " + profile() +
                          " --world 2 --global-batch 8 --top 3",
                      d.path(), 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("layouts enumerated"), std::string::npos) << r.output;
  auto j = nlohmann::json::parse(last_line(r.output));
  EXPECT_EQ(j["top"].size(), 3u);
  EXPECT_GE(j["top"][0]["tokens_per_s"].get<double>(), j["top"][1]["tokens_per_s"].get<double>());
  EXPECT_EQ(j["best"]["layout"], j["top"][0]["layout"]);
  r = run_tessel("plan search " + config("bench/llama-tiny.yaml") + " --hardware " + profile() +
                     " --world 2 --global-batch 8 --memory-gib 0.0001",
                 d.path(), 120);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("no layout of 2 ranks fits: every one was pruned"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("peak memory over 0.0001 GiB"), std::string::npos) << r.output;
  EXPECT_TRUE(nlohmann::json::parse(last_line(r.output))["best"].is_null());
}

}  // namespace

namespace {

// parallel.auto takes the layout `tessel plan search` ranks first for the same world and profile,
// records it in the run's config.yaml, and trains with it.
TEST(PlanCli, AutoParallelTrainsWithTheSearchsBestLayout) {
  TempDir d;
  const std::string one_process = config("hardware/cpu-2core-2threads.json");
  const std::string sets = " --set train.global_batch_size=8 --set precision.compute=bf16";
  auto s = run_tessel("plan search " + config("bench/llama-tiny.yaml") + " --hardware " + one_process + " --world 1" + sets,
                      d.path(), 120);
  ASSERT_EQ(s.exit_code, 0) << s.output;
  const auto best = nlohmann::json::parse(last_line(s.output))["best"];
  auto r = run_tessel("train " + config("bench/llama-tiny.yaml") + " --auto-parallel --set parallel.auto_hardware=" +
                          one_process + sets + " --set train.train_iters=2 --set log.dir=" + d.path() + "/run",
                      d.path(), 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("parallel.auto: " + best["layout"].get<std::string>() + " (predicted"), std::string::npos)
      << r.output;
  std::ifstream f(d.path() + "/run/config.yaml");
  const std::string written((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  for (const auto& o : best["overrides"]) {  // "train.micro_batch_size=2" -> "  micro_batch_size: 2"
    const std::string kv = o.get<std::string>(), key = kv.substr(kv.find('.') + 1, kv.find('=') - kv.find('.') - 1);
    EXPECT_NE(written.find("  " + key + ": " + kv.substr(kv.find('=') + 1) + "\n"), std::string::npos) << kv << "\n" << written;
  }
  EXPECT_NE(r.output.find("step     2/2"), std::string::npos) << r.output;
}

TEST(PlanCli, AutoParallelRefusesAMissingProfileAndAModelThatFitsNowhere) {
  TempDir d;
  auto r = run_tessel("train " + config("bench/llama-tiny.yaml") + " --auto-parallel --set parallel.auto_hardware=" +
                          d.path() + "/none.json --set train.train_iters=1",
                      d.path(), 60);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find(d.path() + "/none.json"), std::string::npos) << r.output;
  {  // this machine's profile with 1 KiB of memory per device
    std::ifstream in(config("hardware/cpu-2core-2threads.json"));
    nlohmann::json p = nlohmann::json::parse(in);
    p["memory_gib"] = 1.0 / (1 << 20);
    std::ofstream(d.path() + "/small.json") << p.dump();
  }
  r = run_tessel("train " + config("bench/llama-tiny.yaml") + " --auto-parallel --set parallel.auto_hardware=" +
                     d.path() + "/small.json --set train.train_iters=1",
                 d.path(), 120);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("parallel.auto: no layout of 1 ranks fits on "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("x peak memory over 9.53674e-07 GiB"), std::string::npos) << r.output;
}

}  // namespace
