#include "tessel/kernels/gemm_peak_check.h"

#include <fmt/format.h>

namespace tessel::kernels {

bool physically_possible(double gflops, int threads) { return gflops <= kMaxGflopsPerThread * double(threads > 0 ? threads : 1); }

PeakVerdict judge_peak(const PeakMeasurement& m) {
  if (!(m.one_thread > 0) || !(m.all_threads > 0))
    return {false, fmt::format("no usable measurement ({:.1f} GFLOP/s with 1 thread, {:.1f} with {})", m.one_thread,
                               m.all_threads, m.threads)};
  if (!physically_possible(m.one_thread, 1) || !physically_possible(m.all_threads, m.threads))
    return {false, fmt::format("{:.0f} GFLOP/s with 1 thread, {:.0f} with {}: more than a CPU core computes ({:.0f} "
                               "GFLOP/s per thread at most); the clock did not time the GEMM",
                               m.one_thread, m.all_threads, m.threads, kMaxGflopsPerThread)};
  if (m.others_cpu_share > kMaxOthersCpuShare)
    return {false, fmt::format("other processes used {:.0f}% of the CPU during the measurement (at most {:.0f}% "
                               "allowed)",
                               100 * m.others_cpu_share, 100 * kMaxOthersCpuShare)};
  const double scaling = m.all_threads / m.one_thread;
  if (m.threads > 1 && scaling < kMinThreadScaling * m.threads)
    return {false, fmt::format("{} threads reached only {:.2f}x one thread ({:.1f} vs {:.1f} GFLOP/s; at least "
                               "{:.2f}x expected)",
                               m.threads, scaling, m.all_threads, m.one_thread, kMinThreadScaling * m.threads)};
  return {true, ""};
}

}  // namespace tessel::kernels
