#pragma once
// Rewind (docs/resilience.md): after every step the ranks agree whether any detector fired; if one
// did, every rank restores the last good state (an in-memory snapshot, or the newest checkpoint on
// disk), skips the iterations between it and the flagged step (their data is not trained on again),
// and trains on. More than max_rewinds rewinds within rewind_window iterations stop the run.
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessel/comm/communicator.h"
#include "tessel/resilience/detectors.h"
#include "tessel/train/trainer.h"

namespace tessel::resilience {

// Exit status of a run stopped because rewinding did not help (EX_DATAERR of sysexits.h): the data
// or the settings, not the machine, are at fault, so `tessel launch` does not restart it.
inline constexpr int kExitCodeDiverged = 65;

// What every rank agreed on after a step (collective over world): the stop signal any rank received
// (0: none), and the anomaly, if any rank's detectors fired: the most severe detector, its value on
// the lowest rank that saw it, and every rank that saw any.
struct StepVerdict {
  int stop_signal = 0;
  std::optional<Anomaly> anomaly;
  int first_rank = -1;
  std::vector<int> ranks;
};
StepVerdict agree_after_step(comm::Communicator& world, int stop_signal, const std::optional<Anomaly>& mine);

// The training state at the end of an accepted step, kept in memory.
struct GoodState {
  train::TrainerSnapshot state;
  int64_t iteration = 0;  // steps completed when it was taken
  int64_t consumed = 0;   // samples consumed then
};

// Counts rewinds: allow() records one at `iteration` and says whether it stays within max_rewinds
// over the last `window` iterations.
class RewindBudget {
 public:
  RewindBudget(int64_t max_rewinds, int64_t window) : max_(max_rewinds), window_(window) {}
  bool allow(int64_t iteration);
  int64_t recent() const { return int64_t(at_.size()); }
  // The iterations of the rewinds counted (saved in checkpoints), and their restoration on a restart.
  std::vector<int64_t> steps() const { return {at_.begin(), at_.end()}; }
  void restore(const std::vector<int64_t>& steps) { at_.assign(steps.begin(), steps.end()); }

 private:
  int64_t max_, window_;
  std::deque<int64_t> at_;
};

// A rewind's record, for metrics.jsonl and the console.
struct RewindEvent {
  int64_t step = 0;            // the flagged step
  Anomaly anomaly;
  std::vector<int> ranks;      // ranks whose detectors fired
  std::string restored_from;   // "snapshot" or the checkpoint directory
  int64_t restored_step = 0;
  int64_t skipped_first = 0, skipped_last = 0;  // iterations whose data is skipped
  int64_t skipped_samples = 0;
  double lr_scale = 1;         // the learning-rate factor from now on
  nlohmann::json json() const;  // one metrics.jsonl line: {"event": "rewind", ...}
  std::string line() const;    // one console line
};

}  // namespace tessel::resilience
