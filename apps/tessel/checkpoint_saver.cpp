#include "checkpoint_saver.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "tessel/ckpt/checkpoint_files.h"
#include "tessel/ckpt/distributed_checkpoint.h"
#include "tessel/ckpt/host_copies.h"
#include "tessel/ckpt/safetensors.h"
#include "tessel/comm/watchdog.h"

namespace tessel::app {

namespace fs = std::filesystem;

CheckpointSaver::CheckpointSaver(const train::Config& cfg, train::Trainer& trainer, comm::Communicator& world,
                                 comm::ParallelState& groups, resilience::FaultPlan& faults)
    : cfg_(cfg), trainer_(trainer), world_(world), groups_(groups), faults_(faults), lead_(world.rank() == 0) {}

namespace {

// Runs one part of a save; a filesystem error (the directory refuses new entries, a full disk)
// reaches the user naming the save and checkpoint.dir, not as the library's bare text.
// `publishing`: the step is being renamed into place and older ones pruned, so what is on disk may
// be part way (latest says which step is whole); before that, nothing saved earlier was touched.
template <class F>
auto naming_the_save(int64_t step, const std::string& dir, F&& f, bool publishing = false) {
  try {
    return f();
  } catch (const std::filesystem::filesystem_error& e) {
    TESSEL_FAIL("cannot {} the checkpoint of step {} in checkpoint.dir '{}': {}; {}", publishing ? "publish" : "save",
                step, dir, e.what(),
                publishing ? "'latest' names the newest whole checkpoint" : "the checkpoints already saved there are intact");
  }
}

}  // namespace

void CheckpointSaver::damage_faults(int64_t step) {
  for (auto kind : {resilience::FaultKind::corrupt_checkpoint, resilience::FaultKind::truncate_checkpoint})
    if (faults_.take(kind, step, true)) {
      const std::string step_dir = (fs::path(cfg_.checkpoint.dir) / ckpt::step_name(step)).string();
      std::printf("injected fault %s on rank %d: damaged %s\n", resilience::fault_name(kind), world_.rank(),
                  resilience::damage_checkpoint(step_dir, kind).c_str());
      std::fflush(stdout);
    }
  world_.barrier();  // the damage is done before any rank reads the checkpoint again
}

void CheckpointSaver::agree_on_write(const std::exception_ptr& error, int64_t step) {
  int ok = error ? 0 : 1;
  world_.all_reduce(&ok, 1, DType::i32, comm::ReduceOp::min);
  if (error) naming_the_save(step, cfg_.checkpoint.dir, [&] { std::rethrow_exception(error); });
  TESSEL_CHECK(ok, "the checkpoint save of step {} failed on another rank (its message names the file); the "
               "checkpoints already saved in '{}' are intact", step, cfg_.checkpoint.dir);
}

void CheckpointSaver::complete(bool publish) {
  const comm::UntimedWaits io;  // peers wait while rank 0 writes and publishes: not a fault
  PendingSave p = std::move(*pending_);
  pending_.reset();
  if (p.writer) {
    std::exception_ptr error;
    try {
      p.writer->wait();
    } catch (...) {
      error = std::current_exception();
    }
    agree_on_write(error, p.step);
  }
  const std::string tmp = p.staged.finish();
  if (lead_) {
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - p.began).count();
    if (!publish) {
      fs::remove_all(tmp);
      std::printf("dropped the checkpoint of step %lld unpublished: the step after it was flagged\n", (long long)p.step);
    } else {
      const std::string where = naming_the_save(p.step, cfg_.checkpoint.dir, [&] {
        return ckpt::publish_checkpoint(cfg_.checkpoint.dir, p.step, tmp, cfg_.checkpoint.keep);
      }, true);
      if (p.writer)
        std::printf("saved checkpoint %s, written in the background (%.2f s since the save began)\n", where.c_str(), took);
      else if (p.validated)
        std::printf("published checkpoint %s\n", where.c_str());
      else
        std::printf("saved checkpoint %s in %.2f s\n", where.c_str(), took);
    }
    std::fflush(stdout);
  }
  world_.barrier();  // every rank sees `latest` as rank 0 left it
  if (publish) damage_faults(p.step);
}

void CheckpointSaver::after_step(bool good) {
  if (!pending_) return;
  if (!good && !pending_->validated) return complete(false);
  // A validated save is good whatever follows; before a rewind it is completed (it may be the newest).
  if (!good) return complete(true);
  pending_->validated = true;
  int written = !pending_->writer || pending_->writer->done();
  if (pending_->writer) world_.all_reduce(&written, 1, DType::i32, comm::ReduceOp::min);
  if (written) complete(true);
}

void CheckpointSaver::settle() {
  if (pending_) complete(pending_->validated);
}

CheckpointSaver::Staged CheckpointSaver::stage(const ckpt::TrainState& st, bool background) {
  Staged s;
  naming_the_save(st.step, cfg_.checkpoint.dir, [&] {
    if (cfg_.checkpoint.distributed) {
      // Every rank writes what it owns; rank 0 adds the metadata.
      s.save = ckpt::stage_distributed_checkpoint(
          cfg_.checkpoint.dir, trainer_.model().params(), trainer_.optimizer(), st, cfg_.to_yaml(), world_,
          trainer_.checkpoint_state_tensors(),
          {{"world", world_.size()}, {"tensor", groups_.tp_size()}, {"pipeline", groups_.pp_size()},
           {"virtual_pipeline", cfg_.parallel.virtual_pipeline_model_parallel_size}, {"data", groups_.dp_size()},
           {"context", groups_.cp_size()}, {"expert", groups_.ep_size()},
           {"distributed_optimizer", trainer_.distributed_optimizer() ? 1 : 0}},
          background);
    } else {
      // Collective: the distributed optimizer gathers its moments over dp, tensor-parallel shards are
      // gathered over tp, and the pipeline stages of the writer's replica send theirs to it; replicas
      // are identical, so rank 0 alone writes.
      s.gathered.emplace(trainer_.full_optimizer_state());
      const auto& c = groups_.coords();
      comm::Communicator* stages = c.tp == 0 && c.cp == 0 && c.dp == 0 ? &groups_.pp() : nullptr;
      s.save = ckpt::stage_checkpoint(cfg_.checkpoint.dir, trainer_.model().params(), s.gathered->view, st,
                                      cfg_.to_yaml(), cfg_.checkpoint.keep, &groups_.tp(), lead_, stages,
                                      trainer_.checkpoint_state_tensors(), &groups_.ep(), background);
    }
  });
  return s;
}

void CheckpointSaver::prepare_background_saves(int64_t start, int64_t consumed) {
  const auto& ck = cfg_.checkpoint;
  if (ck.dir.empty() || !ck.async_save || ck.interval <= 0) return;
  // The training loop's saves in order (train_command.cpp): a skipped iteration saves nothing; an
  // exit_interval step saves synchronously and ends the run; an interval step before the last saves
  // in the background; the last step's save is synchronous. Stops at the first save.
  const auto& t = cfg_.train;
  bool background = false;
  for (int64_t it = start + 1; it < t.train_iters; ++it) {
    if (t.skips_iteration(it)) continue;
    if (t.exit_interval > 0 && it % t.exit_interval == 0) break;
    if (it % ck.interval == 0) {
      background = true;
      break;
    }
  }
  if (!background) return;
  const comm::UntimedWaits io;  // the writer's stage gathers onto it
  const auto began = std::chrono::steady_clock::now();
  const size_t before = ckpt::host_copy_bytes_allocated();
  stage({start, consumed, uint64_t(cfg_.train.seed), 0, trainer_.learning_rate_scale(), {}}, true);  // then dropped
  // The distributed format's stage made its temporary directory (rank 0, named by its PID); nothing
  // was written there.
  if (lead_ && ck.distributed) fs::remove_all(ckpt::temporary_step_dir(ck.dir, start, ::getpid()));
  if (lead_) {
    std::printf("asynchronous saves: %.1f MB of host copies allocated in %.2f s, before training (every save "
                "copies into them)\n", double(ckpt::host_copy_bytes_allocated() - before) / 1e6,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
    std::fflush(stdout);
  }
}

void CheckpointSaver::save(int64_t step, int64_t consumed, bool publish_now) {
  if (cfg_.checkpoint.dir.empty()) return;
  settle();  // a new save waits for the previous one
  const comm::UntimedWaits io;  // a save takes what the disk takes; peers wait for the writers
  const ckpt::TrainState st{step, consumed, uint64_t(cfg_.train.seed), 0, trainer_.learning_rate_scale(),
                            history_ ? history_() : ckpt::ResilienceHistory{}};
  PendingSave p;
  p.step = step;
  p.began = std::chrono::steady_clock::now();
  const bool background = cfg_.checkpoint.async_save && !publish_now;
  // Injected: this rank's writes fail as on a full disk (the save throws; what was saved stays).
  const bool disk_full = faults_.take(resilience::FaultKind::disk_full, step, true);
  const size_t host_copies_before = ckpt::host_copy_bytes_allocated();
  // A synchronous write reads the gathered moments in place, so they live until it is done.
  Staged staged = stage(st, background);
  p.staged = std::move(staged.save);
  const size_t host_copies_allocated = ckpt::host_copy_bytes_allocated() - host_copies_before;
  auto write = [w = p.staged.write, disk_full] {
    if (disk_full) ckpt::simulate_disk_full(true);
    try {
      w();
    } catch (...) {
      if (disk_full) ckpt::simulate_disk_full(false);
      throw;
    }
    if (disk_full) ckpt::simulate_disk_full(false);
  };
  p.staged.write = nullptr;  // the copies it holds die with the writer's callable, once written
  if (background) {
    p.writer = std::make_unique<ckpt::BackgroundWrite>(std::move(write));
  } else {
    std::exception_ptr error;
    try {
      write();
    } catch (...) {
      error = std::current_exception();
    }
    agree_on_write(error, step);  // also: every rank waits here (untimed) for the slowest writer
  }
  if (lead_ && !publish_now) {
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - p.began).count();
    if (background && host_copies_allocated > 0)
      std::printf("saving the checkpoint of step %lld in the background (staged in %.2f s, allocating %.1f MB of "
                  "host copies)\n", (long long)step, took, double(host_copies_allocated) / 1e6);
    else if (background)
      std::printf("saving the checkpoint of step %lld in the background (staged in %.2f s)\n", (long long)step, took);
    else
      std::printf("saved checkpoint of step %lld in %.2f s (published once the next step passes the detectors)\n",
                  (long long)step, took);
    std::fflush(stdout);
  }
  pending_ = std::move(p);
  if (publish_now) complete(true);
}

}  // namespace tessel::app
