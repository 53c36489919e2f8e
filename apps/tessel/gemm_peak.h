#pragma once
// This machine's GEMM peak (GFLOP/s) for MFU, measured with oneDNN (2048^3) and cached in
// ~/.cache/tessel/gemm_peak.json ($XDG_CACHE_HOME/tessel), keyed by CPU model, oneDNN ISA, thread
// count and dtype. A measurement is cached only when it passes kernels::judge_peak (N threads scale
// over 1 thread, no other process took the cores meanwhile): a busy machine would otherwise record a
// low peak and every later MFU would be too high. Cache entries older than 30 days, or written by a
// tessel without that check, are measured again; `--remeasure-peak` forces it.
#include <string>
#include <utility>

#include "tessel/core/dtype.h"

namespace tessel::app {

// {GFLOP/s, where it came from: "cached ... --remeasure-peak ...", "measured now ..." or
// "PROVISIONAL ..." (the machine looked busy: used for this run only, not cached)}.
std::pair<double, std::string> gemm_peak(DType dtype, bool remeasure);

}  // namespace tessel::app
