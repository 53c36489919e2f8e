// tessel schedule: every kind by name, the published DualPipe case (REFERENCE.md, "Pipeline
// schedules": PP 8, 20 micro-batches, F 1, B 1, W 1, F&B 3 -> makespan 66, bubble 6) read from the
// JSON last line, and the kinds' constraints refused with the reason.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/cli_support.h"

using namespace tessel::testing;

namespace {

nlohmann::json last_line_json(const std::string& output) {
  const auto end = output.find_last_not_of('\n');
  const auto begin = output.rfind('\n', end);
  return nlohmann::json::parse(output.substr(begin == std::string::npos ? 0 : begin + 1, end - begin));
}

TEST(ScheduleCommand, DualPipePublishedCaseEndsWithItsMakespanAndBubbleAsJson) {
  TempDir d;
  const auto r = run_tessel("schedule --kind dualpipe --pp 8 --micro-batches 20 --f 1 --b 1 --w 1 --fb 3", d.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = last_line_json(r.output);
  EXPECT_DOUBLE_EQ(j.at("makespan").get<double>(), 66.0) << r.output;
  EXPECT_DOUBLE_EQ(j.at("bubble").get<double>(), 6.0) << r.output;
  EXPECT_EQ(j.at("peak_activations"), nlohmann::json(std::vector<int>(8, 9))) << r.output;
}

TEST(ScheduleCommand, EveryKindRunsAndConstraintsAreRefusedWithTheReason) {
  TempDir d;
  for (const char* kind : {"1f1b", "zb-h1", "zb-h2", "zb-v", "dualpipe", "dualpipev"}) {
    const auto r = run_tessel(std::string("schedule --kind ") + kind + " --pp 4 --micro-batches 8", d.path());
    ASSERT_EQ(r.exit_code, 0) << kind << "\n" << r.output;
    EXPECT_EQ(last_line_json(r.output).at("kind"), kind);
  }
  auto r = run_tessel("schedule --kind dualpipe --pp 3 --micro-batches 8", d.path());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("dualpipe needs an even pipeline size, got 3"), std::string::npos) << r.output;
  r = run_tessel("schedule --kind dualpipev --pp 4 --micro-batches 6", d.path());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("dualpipev needs at least 2 x pipeline size = 8 micro-batches, got 6"), std::string::npos)
      << r.output;
  r = run_tessel("schedule --kind zb-v --pp 4 --vpp 2 --micro-batches 8", d.path());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("'zb-v' sets its own chunks per rank (2)"), std::string::npos) << r.output;
}

}  // namespace
