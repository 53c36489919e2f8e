// `tessel train` end to end in strict cpu mode (TESSEL_DEVICE=cpu-strict): data loading, the steps,
// evaluation, a checkpoint saved and a resume from it reach device memory only through kernels and
// explicit copies; any other host access would fail the run, naming the tensor. And a mode that does
// not exist is refused with the allowed ones.
#include <gtest/gtest.h>

#include "cli/cli_support.h"

using namespace tessel::testing;

namespace {

const std::string kStrict = "TESSEL_DEVICE=cpu-strict";

TEST(StrictCpuCli, TrainingSavingAndResumingTouchDeviceMemoryOnlyThroughKernels) {
  TempDir d;
  const std::string args = "train " + config("synthetic.yaml") +
                           " --set train.train_iters=3 --set checkpoint.interval=2 --set checkpoint.dir=ckpt"
                           " --set log.dir=logs --set train.eval_interval=2 --set train.eval_iters=1";
  auto r = run_tessel(args, d.path(), 300, kStrict);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("strict cpu mode"), std::string::npos) << r.output;
  r = run_tessel(args + " --set train.train_iters=4", d.path(), 300, kStrict);  // resumes from step 3
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resum"), std::string::npos) << r.output;
}

// An asynchronous save's writer thread reads host copies only (no device scope on its thread), in
// both formats; the synchronous saves at the end read device memory under one.
TEST(StrictCpuCli, AsynchronousSavesWriteHostCopies) {
  for (const char* distributed : {"false", "true"}) {
    TempDir d;
    const std::string args = "train " + config("synthetic.yaml") +
                             " --set train.train_iters=4 --set checkpoint.interval=1 --set checkpoint.dir=ckpt"
                             " --set log.dir=logs --set checkpoint.async_save=true --set checkpoint.distributed=" +
                             distributed;
    const auto r = run_tessel(args, d.path(), 300, kStrict);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output.find("strict cpu mode"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("written in the background"), std::string::npos) << r.output;
  }
}

// The asynchronous queue changes when kernels run, never what they compute: every synchronisation
// is where it must be, or a loss would differ (or the run stop).
TEST(StrictCpuCli, TheQueuedRunTrainsToTheSameLossesBitForBit) {
  TempDir plain, strict;
  const std::string args = "train " + config("synthetic.yaml") +
                           " --set train.train_iters=4 --set log.dir=run --set train.eval_interval=2 --set train.eval_iters=1";
  auto r = run_tessel(args, plain.path(), 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_tessel(args, strict.path(), 300, kStrict);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* key : {"loss", "grad_norm", "eval_loss"}) {
    const auto want = metric_values(plain.path() + "/run/metrics.jsonl", key);
    const auto got = metric_values(strict.path() + "/run/metrics.jsonl", key);
    ASSERT_FALSE(want.empty()) << key;
    EXPECT_EQ(got, want) << key;
  }
}

TEST(StrictCpuCli, AnUnknownDeviceModeIsRefusedWithTheAllowedOnes) {
  TempDir d;
  const auto r = run_tessel("train " + config("synthetic.yaml") + " --set train.train_iters=1", d.path(), 120,
                            "TESSEL_DEVICE=gpu");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("TESSEL_DEVICE='gpu' is not a device mode (allowed: cpu, cpu-strict)"), std::string::npos)
      << r.output;
  // Also by a command that never allocates a tensor: the mode is checked before any command runs.
  const auto s = run_tessel("schedule --kind 1f1b --pp 2 --micro-batches 4", d.path(), 60, "TESSEL_DEVICE=cpu-strcit");
  EXPECT_NE(s.exit_code, 0) << s.output;
  EXPECT_NE(s.output.find("TESSEL_DEVICE='cpu-strcit' is not a device mode (allowed: cpu, cpu-strict)"),
            std::string::npos)
      << s.output;
}

}  // namespace
