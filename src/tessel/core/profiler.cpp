#include "tessel/core/profiler.h"

namespace tessel {

Profiler& Profiler::get() {
  static Profiler p;
  return p;
}

void Profiler::add(const char* op, double seconds, double flops) {
  OpStat& s = stats[op];
  s.seconds += seconds;
  s.flops += flops;
  s.calls += 1;
}

}  // namespace tessel
