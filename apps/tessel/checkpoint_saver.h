#pragma once
// The checkpoint saves of `tessel train` (every call collective over the world):
// - synchronous, or written by a background thread while training goes on (checkpoint.async_save);
// - published (renamed into place, `latest`, pruned) only once the step after the saved one passed
//   the resilience detectors: the state of step k is trusted only when step k+1, which computes from
//   it, did; a flagged step removes it, so a bad state never pushes good checkpoints out;
// - with the injected checkpoint faults (disk-full, corrupt- and truncate-checkpoint).
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>

#include "tessel/ckpt/background_write.h"
#include "tessel/ckpt/checkpoint.h"
#include "tessel/comm/parallel_state.h"
#include "tessel/resilience/faults.h"
#include "tessel/train/config.h"
#include "tessel/train/trainer.h"

namespace tessel::app {

class CheckpointSaver {
 public:
  CheckpointSaver(const train::Config& cfg, train::Trainer& trainer, comm::Communicator& world,
                  comm::ParallelState& groups, resilience::FaultPlan& faults);
  // Saves the trainer's state as step `step` with data position `consumed`. publish_now: the end of
  // training, a stop, or a state known good, written and published before it returns; otherwise it
  // is published after the next step's verdict (after_step). A new save waits for the previous one.
  void save(int64_t step, int64_t consumed, bool publish_now);
  // Before training from step `start`: when this run will save in the background, stages the state
  // once and drops it, so the host copies every background save copies into (ckpt/host_copies.h)
  // are allocated now. Otherwise the first save would fault their pages in inside the training loop
  // (3.3-4 s for llama-134m's 1.6 GB on a 2-core VM), as a GPU run allocates its pinned staging
  // buffers once, up front. Collective.
  void prepare_background_saves(int64_t start, int64_t consumed);
  // After each trained step: a flagged one drops the pending save (unless an earlier step validated
  // it); a good one validates it, and it is published once every rank's writer is done (asked
  // without waiting).
  void after_step(bool good);
  // Waits for the pending save and publishes it if the step after it passed (before a stop, a
  // rewind from disk and the end).
  void settle();
  // Where saves take the resilience detectors' history from (saved with the state; none: empty).
  void set_resilience_history(std::function<ckpt::ResilienceHistory()> history) { history_ = std::move(history); }

 private:
  struct PendingSave {
    int64_t step = 0;
    ckpt::StagedSave staged;
    std::unique_ptr<ckpt::BackgroundWrite> writer;  // null: written already
    bool validated = false;                          // the step after it passed
    std::chrono::steady_clock::time_point began;
  };
  // One save's staging (collective): its write and finish, and for the whole-tensor format the
  // distributed optimizer's moments gathered, which a synchronous write reads in place.
  struct Staged {
    ckpt::StagedSave save;
    std::optional<train::GatheredOptimizerState> gathered;
  };
  Staged stage(const ckpt::TrainState& st, bool background);
  void complete(bool publish);
  // Every rank learns whether every rank's write succeeded, and all throw alike when one failed.
  void agree_on_write(const std::exception_ptr& error, int64_t step);
  void damage_faults(int64_t step);  // injected, once the checkpoint of `step` is published

  const train::Config& cfg_;
  train::Trainer& trainer_;
  comm::Communicator& world_;
  comm::ParallelState& groups_;
  resilience::FaultPlan& faults_;
  const bool lead_;
  std::optional<PendingSave> pending_;
  std::function<ckpt::ResilienceHistory()> history_;
};

}  // namespace tessel::app
