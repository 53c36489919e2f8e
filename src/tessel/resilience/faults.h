#pragma once
// Fault injection for tests and drills (`tessel train --inject KIND@STEP[:RANK]`, or
// resilience.inject): each fault fires once, at the step given, on one world rank (0 when not
// given). The step is the one being trained: nan@5 poisons the gradients of step 5.
//   nan                  a NaN in that rank's gradients (after their reduction, before the norm)
//   spike                that rank's micro-batches corrupted: every target token replaced by another
//   kill                 SIGKILL to that rank as the step starts
//   hang                 SIGSTOP to that rank as the step starts: it stops before its next collective
//   sigterm              SIGTERM to that rank as the step starts (a preemption)
//   corrupt-checkpoint   after the step's checkpoint is saved, bytes flipped in one of its files
//   truncate-checkpoint  after the step's checkpoint is saved, one of its files cut to half
//   disk-full            the step's checkpoint save fails with ENOSPC on that rank
// Under `tessel launch`, faults fire in the first attempt only (TESSEL_LAUNCH_ATTEMPT unset or 0), so
// a restarted run does not meet its fault again.
#include <cstdint>
#include <string>
#include <vector>

#include "tessel/data/batch.h"

namespace tessel::resilience {

enum class FaultKind { nan, spike, kill, hang, sigterm, corrupt_checkpoint, truncate_checkpoint, disk_full };
const char* fault_name(FaultKind k);
std::string fault_kinds_text();  // "nan, spike, ..." for messages

struct Fault {
  FaultKind kind;
  int64_t step;
  int rank = 0;
};

// Parses "KIND@STEP[:RANK]" items separated by commas or spaces. Throws, naming the item and what is
// allowed, on an unknown kind, a step < 1 or a rank outside [0, world).
std::vector<Fault> parse_faults(const std::string& spec, int world);

class FaultPlan {
 public:
  FaultPlan() = default;
  // attempt: the supervised run's attempt number (faults fire in attempt 0 only).
  FaultPlan(std::vector<Fault> faults, int rank, int attempt);
  // Whether `kind` fires on this rank at `step` (or, with due, at any step up to it: the checkpoint
  // faults act on the first save at or after their step); true once per fault.
  bool take(FaultKind kind, int64_t step, bool due = false);
  bool empty() const { return faults_.empty(); }

 private:
  std::vector<Fault> faults_;  // this rank's, not yet fired
};

// `spike`: a copy of the batch whose every target is another token (target + vocab / 2, modulo
// vocab), as a corrupted shard of data would give: the loss jumps to about the model's confidence.
data::Batch corrupt_batch(const data::Batch& b, int64_t vocab);

// The attempt number `tessel launch` gives its child (TESSEL_LAUNCH_ATTEMPT; 0 when unset).
int launch_attempt();

// Damages a published checkpoint the way a failing disk would (corrupt: flips bytes in the middle of
// its largest tensor file; truncate: cuts that file to half). Returns the file damaged.
std::string damage_checkpoint(const std::string& step_dir, FaultKind kind);

}  // namespace tessel::resilience
