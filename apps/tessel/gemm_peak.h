#pragma once
// This machine's GEMM peak (GFLOP/s) for MFU: read from the cache profile
// (~/.cache/tessel/gemm_peak.json, keyed by CPU model, thread count and dtype) or measured with
// oneDNN (2048^3, best of 5) and written there. The cache keeps the best measurement seen, since a
// busy machine can only lower one.
#include <string>
#include <utility>

#include "tessel/core/dtype.h"

namespace tessel::app {

std::pair<double, std::string> gemm_peak(DType dtype, bool remeasure);  // {GFLOP/s, "measured now" / "cached in ..."}

}  // namespace tessel::app
