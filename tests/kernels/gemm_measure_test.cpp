// The GEMM throughput measurement behind MFU (`kernels::measure_gemm_gflops`, cached by tessel as
// the machine's peak) times the GEMM itself in every device mode. In strict mode a matmul is
// queued on another thread, and a clock around the launch read 18.9 million GFLOP/s on a 2-core
// machine, a figure that then went into the peak cache and made every MFU about zero.
#include <gtest/gtest.h>

#include "tessel/core/device.h"
#include "tessel/kernels/gemm.h"

namespace tessel {
namespace {

// No CPU this runs on does 100 TFLOP/s (a 2-core machine here does about 0.4); a timed launch does
// millions. The bound is that far from either so that no load on the machine can decide it.
constexpr double kPhysicalBoundGflops = 100000;

TEST(GemmMeasure, StrictModeTimesTheKernelNotItsLaunch) {
  const bool previous = strict_cpu();
  set_strict_cpu(true);
  const double gflops = kernels::measure_gemm_gflops(DType::f32, 1024, 3);
  set_strict_cpu(previous);
  EXPECT_GT(gflops, 0.0);
  EXPECT_LT(gflops, kPhysicalBoundGflops);
}

}  // namespace
}  // namespace tessel
