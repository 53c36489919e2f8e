// config.yaml and metrics.jsonl: every write checked, a failure names the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <fstream>

#include "cli/cli_support.h"
#include "support/error_of.h"
#include "tessel/core/check.h"
#include "tessel/train/run_files.h"

using namespace tessel;

namespace {

using tessel::testing::error_of;

TEST(RunFiles, AFullDiskFailsTheMetricsWriteNamingTheFile) {
  // /dev/full accepts the open and fails every write with ENOSPC, like a full disk.
  train::MetricsLog log("/dev/full");
  const std::string msg = error_of([&] { log.append({{"step", 1}, {"loss", 6.2}}); });
  EXPECT_NE(msg.find("cannot write '/dev/full': No space left on device"), std::string::npos) << msg;
}

TEST(RunFiles, AMissingDirectoryFailsTheWriteNamingTheFile) {
  tessel::testing::TempDir d;
  const std::string path = d.path() + "/gone/config.yaml";
  const std::string msg = error_of([&] { train::write_run_file(path, "model: {}\n"); });
  EXPECT_NE(msg.find("cannot create '" + path + ".tmp-"), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;
  const std::string open_msg = error_of([&] { train::MetricsLog log(d.path() + "/gone/metrics.jsonl"); });
  EXPECT_NE(open_msg.find("cannot open '" + d.path() + "/gone/metrics.jsonl' for writing"), std::string::npos)
      << open_msg;
}

TEST(RunFiles, MetricsKeepTheStepsUpToTheCheckpointAndDropATornLine) {
  tessel::testing::TempDir d;
  const std::string path = d.path() + "/metrics.jsonl";
  std::ofstream(path) << "{\"step\":1,\"loss\":6}\n{\"step\":2,\"eval_loss\":5}\n{\"step\":3,\"loss\":4}\n{\"step\":4,\"lo";
  train::keep_metrics_through(path, 2);
  std::ifstream in(path);
  const std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(kept, "{\"step\":1,\"loss\":6}\n{\"step\":2,\"eval_loss\":5}\n");
  train::MetricsLog log(path);
  log.append({{"step", 3}});
  std::ifstream again(path);
  const std::string all((std::istreambuf_iterator<char>(again)), std::istreambuf_iterator<char>());
  EXPECT_EQ(all, kept + "{\"step\":3}\n");
}

}  // namespace
