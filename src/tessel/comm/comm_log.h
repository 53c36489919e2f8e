#pragma once
// The collectives of a run, one record each (group, kind, payload bytes, group size, whether it was
// launched to overlap computation, and the step phase it was issued in), written by every backend's
// Communicator::count when the log is on. With the op log (kernels/op_log.h) this is a dry run's
// whole step: the planner prices both with a hardware profile.
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "tessel/core/memory.h"

namespace tessel::comm {

struct CommRecord {
  std::string group;  // the communicator's label: "tp", "dp", "pp", ... (ParallelState), or "" unnamed
  std::string kind;   // all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, send, reduce
  int64_t bytes = 0;  // payload as Communicator counts it (communicator.h: what this rank contributes)
  int group_size = 1;
  bool overlapped = false;  // launched inside an OverlappedCommScope (it may run behind computation)
  MemoryPhase phase{};
  // How many collectives alike this record stands for (kernels::OpRecord::count): 1 but on meta runs
  // of alike calls (nn/alike_calls.h).
  int64_t count = 1;
  // Made inside a PairedOverlapScope: a transfer a fused F&B pair keeps in flight while its other
  // pass computes (the MoE rows' all-to-all); the planner prices what the pair hides of it.
  bool pair_overlappable = false;
};

class CommLog {
 public:
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  void set_enabled(bool on) { enabled_.store(on, std::memory_order_relaxed); }
  void add(CommRecord r);  // stamps the calling thread's phase and overlap scope
  std::vector<CommRecord> records() const;
  std::vector<CommRecord> take_records();  // the records, moved out: the log is left empty
  size_t size() const;
  // Appends records [begin, end) once more, each standing for `times` collectives.
  void repeat(size_t begin, size_t end, int64_t times);
  void clear();

 private:
  std::atomic<bool> enabled_{false};
  mutable std::mutex mu_;
  std::vector<CommRecord> records_;
};

CommLog& comm_log();

// Sets one of the calling thread's record flags (CommLog::add stamps them) while alive, and restores
// what it was.
class CommFlagScope {
 public:
  CommFlagScope(const CommFlagScope&) = delete;
  CommFlagScope& operator=(const CommFlagScope&) = delete;

 protected:
  explicit CommFlagScope(bool& flag) : flag_(flag), previous_(flag) { flag = true; }
  ~CommFlagScope() { flag_ = previous_; }

 private:
  bool& flag_;
  bool previous_;
};

// Collectives launched while the scope lives are meant to run behind computation (the gradient
// reducer's buckets, the overlapped parameter all-gather, the context-parallel ring's transfers).
class OverlappedCommScope : public CommFlagScope {
 public:
  OverlappedCommScope();
};

// Collectives made while the scope lives are ones an F&B pair run fused overlaps with its other
// pass (parallel.overlap_moe_expert_parallel_comm: Moe::exchange's rows, not the blocking count
// exchange before them). Records only: what runs is the same.
class PairedOverlapScope : public CommFlagScope {
 public:
  PairedOverlapScope();
};

}  // namespace tessel::comm
