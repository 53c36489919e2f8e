#pragma once
// Whether a measured GEMM peak can be trusted for MFU, from the measurement alone (no timing here, so
// it is unit-tested). A peak measured while other processes load the cores is too low, and every MFU
// computed from it too high. Two signs of that: N threads hardly faster than 1 thread (on an idle
// machine a 2048^3 GEMM scales almost linearly), and CPU time that other processes used on this
// machine while the N-thread GEMM ran.
#include <string>

namespace tessel::kernels {

struct PeakMeasurement {
  int threads = 1;             // N
  double one_thread = 0;       // best GFLOP/s with 1 thread
  double all_threads = 0;      // best GFLOP/s with N threads
  double others_cpu_share = 0; // share of the machine's CPU time used by other processes meanwhile, 0..1
};

struct PeakVerdict {
  bool trusted = false;
  std::string reason;  // why not (empty when trusted), for the user
};

inline constexpr double kMinThreadScaling = 0.75;  // N threads must reach 0.75 x N x one thread
inline constexpr double kMaxOthersCpuShare = 0.10;  // other processes may use at most 10% of the CPU
// No CPU core multiplies faster than this (AMX bf16 at 1,024 FLOP per cycle and 4 GHz is about 4,100
// GFLOP/s): more means the clock timed something other than the GEMM (a launch on a queue, as
// strict mode's once did), and a peak that high makes every MFU about zero.
inline constexpr double kMaxGflopsPerThread = 20000;
bool physically_possible(double gflops, int threads);

PeakVerdict judge_peak(const PeakMeasurement& m);

}  // namespace tessel::kernels
