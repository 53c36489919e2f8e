// tessel dry-run end to end: the per-role report with the step run on meta, the JSON last line, the
// refusal of a layout that cannot exist and of a step peak or model state larger than --memory-gib
// (exit 1, the role, the sizes and where the peak occurs named).
#include <gtest/gtest.h>

#include "cli/cli_support.h"

using namespace tessel::testing;

namespace {

TEST(DryRunCli, DeepSeekV3OnTwoThousandRanksReportsEveryStageAndEndsInJson) {
  TempDir d;
  const auto r = run_tessel("dry-run " + config("deepseek-v3.yaml") + " --world 2048 --steps 0", d.path(), 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("world 2048 = tp 1 x cp 1 x dp 128 x pp 16 (ep 64)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("step: not run (--steps 0): model state only"), std::string::npos) << r.output;
  const auto j = nlohmann::json::parse(last_line(r.output));
  EXPECT_EQ(j["world"], 2048);
  ASSERT_EQ(j["roles"].size(), 16u);
  EXPECT_EQ(j["roles"][15]["ranks"].size(), 128u);
  EXPECT_EQ(j["roles"][15]["ranks"][0], 1920);  // pipeline rank is the slowest coordinate
  EXPECT_TRUE(j["roles"][0]["peak_bytes"].is_null());  // no step was run
  EXPECT_EQ(j["step"], "not run (--steps 0): model state only");
  EXPECT_GT(j["roles"][0]["model_state_requested_bytes_by_category"]["optimizer_state"].get<int64_t>(), 0);
  EXPECT_TRUE(j["fits"].get<bool>());
}

// DeepSeek-V3 at the report's layout: the step runs on meta (MLA, MoE with balanced routing over ep
// 64, MTP on the last stage, FP8 block scaling), every stage of it.
TEST(DryRunCli, DeepSeekV3RunsTheStepOnEveryStage) {
  TempDir d;
  const auto r = run_tessel("dry-run " + config("deepseek-v3.yaml") + " --world 2048", d.path(), 180);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(last_line(r.output));
  ASSERT_EQ(j["roles"].size(), 16u);
  EXPECT_FALSE(j.contains("step")) << r.output;
  for (const auto& role : j["roles"]) {
    EXPECT_GT(role["peak_requested_bytes"].get<int64_t>(), role["model_state_requested_bytes"].get<int64_t>());
    EXPECT_GT(role["comm_by_group"]["ep"]["all_to_all"]["bytes"].get<int64_t>(), 0) << role["role"];
    EXPECT_GT(role["flops_by_op"]["router_forward"].get<double>(), 0) << role["role"];
    EXPECT_GT(role["flops_by_op"]["fp8_gemm"].get<double>(), 0) << role["role"];
  }
  EXPECT_TRUE(j["roles"][15]["flops_by_op"].contains("shift_tokens"));  // MTP on the last stage
  EXPECT_FALSE(j["roles"][0]["flops_by_op"].contains("shift_tokens"));
}

// Llama 3 405B at its published layout: the training step runs on meta for every stage.
TEST(DryRunCli, Llama3At16kRanksRunsTheStepOnEveryStage) {
  TempDir d;
  const auto r = run_tessel("dry-run " + config("llama3-405b.yaml") + " --world 16384", d.path(), 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(last_line(r.output));
  ASSERT_EQ(j["roles"].size(), 16u);
  EXPECT_FALSE(j.contains("step")) << r.output;  // nothing was left out
  for (const auto& role : j["roles"]) {
    const int64_t peak = role["peak_bytes"].get<int64_t>(), state = role["model_state_bytes"].get<int64_t>();
    EXPECT_GT(peak, state) << role["role"];
    int64_t sum = 0;
    for (const auto& [name, bytes] : role["peak_bytes_by_category"].items()) sum += bytes.get<int64_t>();
    EXPECT_EQ(sum, peak) << role["role"];
    EXPECT_GT(role["flops_by_op"]["gemm"].get<double>(), 0) << role["role"];
    for (const char* g : {"tp", "pp", "dp"}) EXPECT_GT(role["comm_bytes_by_group"][g].get<int64_t>(), 0) << g;
  }
  EXPECT_NE(r.output.find("step peak"), std::string::npos);
}

TEST(DryRunCli, AStepPeakThatDoesNotFitIsNamedPerRoleWithWhereItOccurs) {
  TempDir d;
  // Stage 0 peaks at 78.9 GiB, stage 1 at 64.1 GiB (the first stage holds the most micro-batches in flight).
  const auto r = run_tessel("dry-run " + config("llama3-70b.yaml") + " --world 64 --memory-gib 75", d.path(), 60);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("does not fit: pipeline stage 0 of 4: step peak "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("exceeds --memory-gib 75 (parameters "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("does not fit: pipeline stage 1 of 4"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("does not fit: pipeline stage 3 of 4"), std::string::npos) << r.output;
}

TEST(DryRunCli, AModelStateThatDoesNotFitIsNamedPerRoleAndExitsOne) {
  TempDir d;
  const auto r =
      run_tessel("dry-run " + config("llama3-70b.yaml") + " --world 64 --steps 0 --memory-gib 20", d.path(), 60);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  // Stage 0 holds 2.271B parameters at dp 2: bf16 copy 2 B + the fp32 masters' half 2 B per parameter
  // (8.46 GiB, as the fp32 gradients and half of Adam's 8 B) + a whole fp32 copy of the embedding's
  // vocabulary shard (16,032 x 8,192 x 4 B = 0.49 GiB) and the norms.
  EXPECT_NE(r.output.find("does not fit: pipeline stage 0 of 4: model state 25.87 GiB exceeds --memory-gib 20 "
                          "(parameters 8.95, gradients 8.46, optimizer_state 8.46 GiB)"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(nlohmann::json::parse(last_line(r.output))["fits"].get<bool>());
}

TEST(DryRunCli, ALayoutThatCannotExistIsRefused) {
  TempDir d;
  auto r = run_tessel("dry-run " + config("llama3-70b.yaml") + " --world 60", d.path(), 60);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("world size 60 is not divisible by tensor_model_parallel_size 8 x context_parallel_size 1 x "
                          "pipeline_model_parallel_size 4 = 32"),
            std::string::npos)
      << r.output;
  r = run_tessel("dry-run " + config("llama3-70b.yaml") + " --world 0", d.path(), 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

}  // namespace
