// tessel dry-run end to end: the per-role report, the JSON last line, the refusal of a layout that
// cannot exist and of a model state larger than --memory-gib (exit 1, the role and the sizes named).
#include <gtest/gtest.h>

#include "cli/cli_support.h"

using namespace tessel::testing;

namespace {

std::string last_line(const std::string& out) {
  const size_t end = out.find_last_not_of('\n');
  const size_t start = out.rfind('\n', end);
  return out.substr(start == std::string::npos ? 0 : start + 1, end - (start == std::string::npos ? 0 : start + 1) + 1);
}

TEST(DryRunCli, DeepSeekV3OnTwoThousandRanksReportsEveryStageAndEndsInJson) {
  TempDir d;
  const auto r = run_tessel("dry-run " + config("deepseek-v3.yaml") + " --world 2048", d.path(), 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("world 2048 = tp 1 x cp 1 x dp 128 x pp 16 (ep 64)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("not counted: the training step on the meta device is not supported yet"), std::string::npos);
  const auto j = nlohmann::json::parse(last_line(r.output));
  EXPECT_EQ(j["world"], 2048);
  ASSERT_EQ(j["roles"].size(), 16u);
  EXPECT_EQ(j["roles"][15]["ranks"].size(), 128u);
  EXPECT_EQ(j["roles"][15]["ranks"][0], 1920);  // pipeline rank is the slowest coordinate
  EXPECT_TRUE(j["roles"][0]["peak_bytes"].is_null());  // the step is not run yet
  EXPECT_GT(j["roles"][0]["model_state_requested_bytes_by_category"]["optimizer_state"].get<int64_t>(), 0);
  EXPECT_TRUE(j["fits"].get<bool>());
}

TEST(DryRunCli, AModelStateThatDoesNotFitIsNamedPerRoleAndExitsOne) {
  TempDir d;
  const auto r = run_tessel("dry-run " + config("llama3-70b.yaml") + " --world 64 --memory-gib 20", d.path(), 60);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("does not fit: pipeline stage 0 of 4: model state 29.61 GiB exceeds --memory-gib 20 "
                          "(parameters 12.69, gradients 8.46, optimizer_state 8.46 GiB)"),
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
