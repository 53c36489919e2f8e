// The trust check of a measured GEMM peak (kernels::judge_peak): what a loaded machine measures must
// not be trusted (and so not cached), what an idle one measures must. Numbers are given, not timed.
#include <gtest/gtest.h>

#include <cmath>

#include "tessel/kernels/gemm_peak_check.h"

namespace tessel::kernels {
namespace {

TEST(GemmPeakCheck, IdleMachineIsTrusted) {
  // 2 threads at 1.9x one thread, 2% of the CPU used by others (a shell, the kernel).
  const PeakVerdict v = judge_peak({2, 820.0, 1560.0, 0.02});
  EXPECT_TRUE(v.trusted) << v.reason;
  EXPECT_EQ(v.reason, "");
}

TEST(GemmPeakCheck, NoScalingOverOneThreadIsNotTrusted) {
  // The case: `make test` loaded both cores, 2 threads measured 388 GFLOP/s like 1 thread.
  const PeakVerdict v = judge_peak({2, 388.0, 388.0, 0.0});
  EXPECT_FALSE(v.trusted);
  EXPECT_NE(v.reason.find("2 threads reached only 1.00x one thread (388.0 vs 388.0 GFLOP/s; at least 1.50x expected)"),
            std::string::npos)
      << v.reason;
}

TEST(GemmPeakCheck, ScalingThresholdIsThreeQuartersOfLinear) {
  EXPECT_TRUE(judge_peak({4, 100.0, 300.0, 0.0}).trusted);    // 3.00x of 4 threads: exactly 0.75 x 4
  EXPECT_FALSE(judge_peak({4, 100.0, 299.0, 0.0}).trusted);   // 2.99x
  EXPECT_TRUE(judge_peak({1, 100.0, 100.0, 0.0}).trusted);    // one thread: nothing to compare
}

TEST(GemmPeakCheck, OtherProcessesUsingTheCoresIsNotTrusted) {
  // Evenly loaded cores can still scale (each thread gets the same share), so the CPU time others
  // took is checked too.
  const PeakVerdict v = judge_peak({2, 300.0, 590.0, 0.45});
  EXPECT_FALSE(v.trusted);
  EXPECT_NE(v.reason.find("other processes used 45% of the CPU during the measurement (at most 10% allowed)"),
            std::string::npos)
      << v.reason;
  EXPECT_TRUE(judge_peak({2, 300.0, 590.0, 0.10}).trusted);
}

TEST(GemmPeakCheck, MissingMeasurementIsNotTrusted) {
  EXPECT_FALSE(judge_peak({2, 0.0, 500.0, 0.0}).trusted);
  const PeakVerdict v = judge_peak({2, 300.0, std::nan(""), 0.0});
  EXPECT_FALSE(v.trusted);
  EXPECT_NE(v.reason.find("no usable measurement"), std::string::npos) << v.reason;
}

TEST(GemmPeakCheck, AFigureNoCpuComputesIsNotTrusted) {
  // What strict mode's queued launches once measured on a 2-core machine: 11.3 and 18.9 million
  // GFLOP/s, scaling "perfectly".
  const PeakVerdict v = judge_peak({2, 11287693.3, 18858253.8, 0.0});
  EXPECT_FALSE(v.trusted);
  EXPECT_NE(v.reason.find("more than a CPU core computes (20000 GFLOP/s per thread at most)"), std::string::npos)
      << v.reason;
  EXPECT_TRUE(judge_peak({2, 4000.0, 7900.0, 0.0}).trusted);  // an AMX machine's bf16 is possible
  EXPECT_TRUE(physically_possible(40000.0, 2));
  EXPECT_FALSE(physically_possible(40001.0, 2));
}

}  // namespace
}  // namespace tessel::kernels
