#pragma once
// This machine's CPU model as /proc/cpuinfo names it ("AMD EPYC", "Intel(R) Xeon(R) Platinum ..."),
// "unknown-cpu" where it does not: the key of the cached GEMM peak and the name of a calibrated
// hardware profile.
#include <string>

namespace tessel {

std::string cpu_model_name();

}  // namespace tessel
