#pragma once
// Per-operator wall-time accounting for `tessel bench --profile`. Off by default (one branch per scope).
// Only the thread that drives the step records (kernels parallelise inside a scope).
#include <chrono>
#include <map>
#include <string>

namespace tessel {

struct OpStat {
  double seconds = 0;
  double flops = 0;
  int64_t calls = 0;
};

class Profiler {
 public:
  static Profiler& get();
  bool enabled = false;
  std::map<std::string, OpStat> stats;
  void add(const char* op, double seconds, double flops);
  void reset() { stats.clear(); }
};

class ProfileScope {
 public:
  explicit ProfileScope(const char* op, double flops = 0) : op_(op), flops_(flops) {
    if (Profiler::get().enabled) t0_ = std::chrono::steady_clock::now();
  }
  ~ProfileScope() {
    if (Profiler::get().enabled)
      Profiler::get().add(op_, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(), flops_);
  }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  const char* op_;
  double flops_;
  std::chrono::steady_clock::time_point t0_{};
};

}  // namespace tessel
