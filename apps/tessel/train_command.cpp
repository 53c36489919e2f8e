// tessel train CONFIG [--set k=v ...]: trains, printing one line per log.interval steps and writing
// metrics.jsonl and the resolved config into log.dir. With checkpoint.dir set it resumes from the
// newest valid checkpoint there, saves every checkpoint.interval steps and at the end, and on
// SIGINT / SIGTERM finishes the current step, saves, and exits with train::kExitCodeStopped (75), so a
// scheduler can tell an interrupted run (to requeue) from a finished one (0). The lead rank holds
// checkpoint.dir's lock for the whole run.
#include <omp.h>
#include <unistd.h>

#include <csignal>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>

#include "auto_parallel.h"
#include "checkpoint_saver.h"
#include "commands.h"
#include "gemm_peak.h"
#include "run_context.h"
#include "stop_signals.h"
#include "tessel/ckpt/checkpoint.h"
#include "tessel/ckpt/checkpoint_dir.h"
#include "tessel/ckpt/distributed_checkpoint.h"
#include "tessel/ckpt/checkpoint_files.h"
#include "tessel/comm/parallel_state.h"
#include "tessel/comm/watchdog.h"
#include "tessel/resilience/detectors.h"
#include "tessel/resilience/faults.h"
#include "tessel/resilience/rewind.h"
#include "tessel/train/data_setup.h"
#include "tessel/train/run_files.h"
#include "tessel/train/trainer.h"

namespace tessel::app {
namespace {

namespace fs = std::filesystem;

struct TrainOptions {
  std::string config;
  std::vector<std::string> sets;
  std::vector<std::string> inject;  // --inject KIND@STEP[:RANK] (resilience/faults.h)
  bool auto_parallel = false;
};

// Stops the collective watchdog's thread on every way out of run_train.
struct WatchdogScope {
  explicit WatchdogScope(const comm::WatchdogOptions& o) { comm::start_watchdog(o); }
  ~WatchdogScope() { comm::stop_watchdog(); }
  WatchdogScope(const WatchdogScope&) = delete;
  WatchdogScope& operator=(const WatchdogScope&) = delete;
};

std::string hms(double s) {
  const int64_t t = int64_t(s + 0.5);
  return fmt::format("{}:{:02d}:{:02d}", t / 3600, (t / 60) % 60, t % 60);
}

int run_train(const TrainOptions& o) {
  // First, before any thread exists: every thread started from here on keeps SIGINT and SIGTERM
  // blocked, and only the watcher takes them (stop_signals.h says why).
  const StopSignals stop_signals;
  std::vector<std::string> sets = o.sets;
  if (o.auto_parallel) sets.push_back("parallel.auto=true");
  if (!o.inject.empty()) sets.push_back(fmt::format("resilience.inject={}", fmt::join(o.inject, ",")));
  // Under mpirun every rank runs this; data parallelism is what the world leaves after the other sizes.
  auto launched = make_world();
  const train::Config cfg = choose_auto_layout(o.config, sets, train::Config::load(o.config, sets), *launched);
  RunContext ctx = make_run_context(cfg, std::move(launched));
  auto& world = ctx.world;
  auto& pstate = *ctx.groups;
  const int64_t dp = ctx.dp;
  const bool lead = ctx.lead;
  const train::RunData run_data = train::make_run_data(cfg);  // data errors before anything is written
  resilience::FaultPlan faults(resilience::parse_faults(cfg.resilience.inject, world->size()), world->rank(),
                               resilience::launch_attempt());
  // One run per checkpoint.dir (two would prune each other's checkpoints), held until exit.
  std::unique_ptr<ckpt::CheckpointDirLock> dir_lock;
  if (lead && !cfg.checkpoint.dir.empty()) {
    dir_lock = std::make_unique<ckpt::CheckpointDirLock>(cfg.checkpoint.dir);
    for (const auto& p : ckpt::remove_stale_saves(cfg.checkpoint.dir))
      std::printf("removed %s, left by an interrupted save\n", p.c_str());
  }
  if (lead) {
    std::error_code ec;
    fs::create_directories(cfg.log.dir, ec);
    TESSEL_CHECK(!ec, "cannot create log.dir '{}': {}", cfg.log.dir, ec.message());
    train::write_run_file((fs::path(cfg.log.dir) / "config.yaml").string(), cfg.to_yaml());
  }
  train::Trainer trainer(cfg, &pstate);
  const auto& m = cfg.model;
  const int64_t mbs = cfg.train.micro_batch_size, accum = cfg.grad_accumulation_steps();
  if (lead) std::printf("tessel train: %s | %s %lld layers, hidden %lld, %.2fM params, %s, global batch %lld, %d threads\n",
              o.config.c_str(), m.arch.c_str(), (long long)m.num_layers, (long long)m.hidden_size,
              double(trainer.model().params().numel()) / 1e6, cfg.precision.compute.c_str(),
              (long long)cfg.train.global_batch_size, omp_get_max_threads());
  if (lead) {
    std::printf("run directory: %s (config.yaml, metrics.jsonl) | data: %s\n", cfg.log.dir.c_str(),
                run_data.description.c_str());
    if (world->size() > 1) std::printf("%s (%s backend)\n", pstate.describe().c_str(), world->backend());
  }
  // Every rank of a stage decides alike; the last stage (which holds a tied embedding too) says why.
  if (const std::string why = trainer.overlap_grad_reduce_ignored(); !why.empty() && pstate.coords().tp == 0 &&
      pstate.coords().dp == 0 && pstate.coords().cp == 0 && pstate.coords().pp + 1 == pstate.pp_size())
    std::fprintf(stderr, "warning: parallel.overlap_grad_reduce=true has no effect here: %s; the distributed "
                 "optimizer reduce-scatters after backward\n", why.c_str());

  // Loads the newest valid checkpoint in checkpoint.dir into the trainer (collective; the ranks agree
  // on which), at start-up and for a rewind without a snapshot. nullopt: there is none.
  auto load_newest = [&]() -> std::optional<ckpt::TrainState> {
    const comm::UntimedWaits io;  // reading takes what the disk takes
    ckpt::NamedTensors extra;
    trainer.wait_for_parameters();
    auto st = ckpt::load_latest_checkpoint(cfg.checkpoint.dir, trainer.model().params(), &trainer.optimizer(),
                                           // the ranks decide together, with one reason: rank 0 says it
                                           [&](const std::string& w) { if (lead) std::fprintf(stderr, "warning: %s\n", w.c_str()); },
                                           !trainer.model().plan().whole() || pstate.ep_size() > 1, &extra, world.get());
    ckpt::check_ranks_loaded_same(*world, cfg.checkpoint.dir, st);
    if (st)
      for (const auto& name : trainer.model().load_state_tensors(extra))
        if (lead)
          std::fprintf(stderr, "warning: checkpoint in '%s' has no %s (saved under another precision or MoE "
                       "setting?): it starts afresh\n", cfg.checkpoint.dir.c_str(), name.c_str());
    // The seed fixes the data order and the dropout streams of the steps taken: a checkpoint that took
    // none (imported from Hugging Face, step 0) may start under any seed.
    if (st && (st->step > 0 || st->consumed_samples > 0))
      TESSEL_CHECK(st->seed == uint64_t(cfg.train.seed),
                   "checkpoint in '{}' was trained with train.seed {}, the config says {}", cfg.checkpoint.dir,
                   st->seed, cfg.train.seed);
    return st;
  };
  int64_t start = 0;
  int64_t consumed = 0;  // samples taken from the training data so far: the next step starts here
  ckpt::ResilienceHistory resumed_history;  // the detectors' windows and rewinds of the resumed run
  if (!cfg.checkpoint.dir.empty()) {
    const auto began = std::chrono::steady_clock::now();
    if (const auto st = load_newest()) {
      start = st->step;
      resumed_history = st->resilience;
      consumed = st->consumed_samples;
      trainer.scale_learning_rate(st->lr_scale);  // what earlier rewinds made of the learning rate
      if (lead)
        std::printf("resumed from checkpoint.dir %s at step %lld (%lld samples consumed); loaded in %.2f s, "
                    "%lld bytes of tensor data read by rank 0\n",
                    cfg.checkpoint.dir.c_str(), (long long)start, (long long)st->consumed_samples,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count(),
                    (long long)st->bytes_read);
    }
  }
  const std::string metrics_path = (fs::path(cfg.log.dir) / "metrics.jsonl").string();
  std::optional<train::MetricsLog> metrics;
  if (lead) {
    train::keep_metrics_through(metrics_path, start);
    metrics.emplace(metrics_path);
  }

  // Saves, published once the step after them passed the detectors (checkpoint_saver.h).
  CheckpointSaver saver(cfg, trainer, *world, pstate, faults);
  saver.prepare_background_saves(start, consumed);
  if (lead && start >= cfg.train.train_iters)
    std::printf("nothing to train: the checkpoint is at step %lld and train.train_iters is %lld\n", (long long)start,
                (long long)cfg.train.train_iters);
  // MFU against this machine's GEMM peak for the compute dtype (cached by `tessel bench`).
  const auto [peak_one, peak_source] = lead ? gemm_peak(m.compute, false) : std::make_pair(1.0, std::string());
  if (lead) std::printf("MFU against a GEMM peak of %.1f GFLOP/s per process (%s)\n", peak_one, peak_source.c_str());
  const double peak_gflops = peak_one * world->size();  // all devices
  const double flops_per_token = m.train_flops_per_token();
  auto evaluate = [&](int64_t step) {
    if (!run_data.valid) return;
    double loss = 0;
    int64_t tokens = 0;
    for (int64_t b = 0; b < cfg.train.eval_iters; ++b) {
      const data::Batch batch = run_data.valid(b * cfg.train.global_batch_size, cfg.train.global_batch_size);
      loss += trainer.eval_loss_sum(batch);
      tokens += batch.targets.numel();
    }
    if (!lead) return;  // every replica computes the same evaluation; rank 0 reports it
    const nlohmann::json j = {{"step", step}, {"eval_loss", loss / double(tokens)}, {"eval_tokens", tokens}};
    metrics->append(j);
    std::printf("eval at step %lld | valid loss %.4f over %lld tokens\n", (long long)step, loss / double(tokens),
                (long long)tokens);
    std::fflush(stdout);
  };
  // From here on a collective that never completes is an error naming who did not arrive
  // (comm/watchdog.h). Not during set-up: rank 0 alone may measure the GEMM peak or clean the
  // checkpoint directory for longer than a short timeout while the others wait.
  const WatchdogScope watchdog(comm::WatchdogOptions{world->size() > 1 ? cfg.resilience.collective_timeout_s : 0.0,
                                                     (fs::path(cfg.log.dir) / "heartbeats").string(), world->rank()});
  const auto t_start = std::chrono::steady_clock::now();
  int64_t it = start;
  const train::ResilienceConfig& rcfg = cfg.resilience;
  resilience::AnomalyDetectors detectors(rcfg);
  resilience::RewindBudget rewinds(rcfg.max_rewinds, rcfg.rewind_window);
  // A restart goes on with what the detectors had learned and the rewinds already counted.
  detectors.restore(resumed_history.loss_window, resumed_history.grad_norm_window);
  rewinds.restore(resumed_history.rewind_steps);
  saver.set_resilience_history([&] {
    return ckpt::ResilienceHistory{detectors.loss_window(), detectors.grad_norm_window(), rewinds.steps()};
  });
  // The last good state in memory (resilience.snapshot_interval): the state at the start, then a
  // snapshot taken every K steps once the step after it passed the detectors (it computed from that
  // state); until then it is `pending`, and a flagged step drops it. At most two copies.
  std::optional<resilience::GoodState> good, pending;
  if (rcfg.snapshot_interval > 0 && it < cfg.train.train_iters) {
    good = resilience::GoodState{trainer.snapshot(), it, consumed};
    if (lead) std::printf("resilience: an in-memory snapshot every %lld steps (%.1f MB on this rank, up to two copies)\n",
                          (long long)rcfg.snapshot_interval, double(good->state.bytes()) / 1e6);
  }
  // Restores the last good state after a flagged step `it` (consumed: the samples through it). The
  // iterations after the restored step, up to and including `it`, are skipped: the run goes on from
  // step `it` with data from `consumed` on. Returns false when there is nothing to restore.
  auto rewind = [&](const resilience::StepVerdict& v) -> bool {
    pending.reset();           // taken right before the flagged step: not trusted
    saver.after_step(false);  // nor is a checkpoint of that state
    resilience::RewindEvent e;
    e.step = it;
    e.anomaly = *v.anomaly;
    e.ranks = v.ranks;
    int64_t restored_consumed = 0;
    if (good) {
      trainer.restore(good->state);
      e.restored_from = "snapshot";
      e.restored_step = good->iteration;
      restored_consumed = good->consumed;
    } else if (!cfg.checkpoint.dir.empty()) {
      const auto st = load_newest();
      if (!st) return false;
      e.restored_from = cfg.checkpoint.dir + "/" + ckpt::step_name(st->step);
      e.restored_step = st->step;
      restored_consumed = st->consumed_samples;
    } else {
      return false;
    }
    e.skipped_first = e.restored_step + 1;
    e.skipped_last = it;
    e.skipped_samples = consumed - restored_consumed;
    if (rcfg.rewind_lr_scale != 1) trainer.scale_learning_rate(rcfg.rewind_lr_scale);
    e.lr_scale = trainer.learning_rate_scale();
    if (lead) {
      metrics->append(e.json());
      std::printf("%s\n", e.line().c_str());
      std::fflush(stdout);
    }
    return true;
  };
  while (it < cfg.train.train_iters) {
    if (cfg.train.skips_iteration(it + 1)) {  // train.skip_train_iteration_range: the data, untrained
      ++it;
      consumed += cfg.train.global_batch_size;
      if (lead) {
        metrics->append({{"step", it}, {"skipped", true}, {"consumed_samples", consumed}});
        std::printf("step %5lld/%lld | skipped (train.skip_train_iteration_range)\n", (long long)it,
                    (long long)cfg.train.train_iters);
      }
      continue;
    }
    // Injected faults that act as the step starts (resilience/faults.h).
    for (auto [kind, signal] : {std::pair{resilience::FaultKind::kill, SIGKILL}, std::pair{resilience::FaultKind::hang, SIGSTOP},
                                std::pair{resilience::FaultKind::sigterm, SIGTERM}})
      if (faults.take(kind, it + 1)) {
        std::printf("injected fault %s at step %lld on rank %d\n", resilience::fault_name(kind), (long long)(it + 1),
                    world->rank());
        std::fflush(stdout);
        ::kill(::getpid(), signal);  // to the process: SIGTERM reaches the stop-signal watcher
        // The watcher takes it on its own thread: wait (briefly) until it has, so that the stop
        // comes at the end of this step, not of a later one.
        for (int i = 0; signal == SIGTERM && i < 1000 && !stop_signals.received(); ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    std::vector<data::Batch> mb;
    // This rank's micro-batches of the global batch, from the next unseen sample on (so a resume with
    // another global batch size continues the data where it stopped): the union over ranks is what
    // one process would see.
    for (int64_t a = 0; a < accum / dp; ++a)
      mb.push_back(run_data.train(consumed + ctx.micro_batch_index(0, accum, a) * mbs, mbs));
    if (faults.take(resilience::FaultKind::spike, it + 1)) {
      for (auto& b : mb) b = resilience::corrupt_batch(b, m.vocab_size);
      std::printf("injected fault spike at step %lld on rank %d: its targets corrupted\n", (long long)(it + 1), world->rank());
    }
    if (faults.take(resilience::FaultKind::nan, it + 1)) {
      trainer.poison_next_step_gradients();
      std::printf("injected fault nan at step %lld on rank %d: a NaN in its gradients\n", (long long)(it + 1), world->rank());
    }
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = trainer.step(mb, it);
    const auto t1 = std::chrono::steady_clock::now();
    ++it;
    consumed += cfg.train.global_batch_size;
    // Detectors on every rank, agreed with the stop signal in one collective, so all stop or rewind at
    // the same step.
    const resilience::StepVerdict verdict =
        resilience::agree_after_step(*world, stop_signals.received(), detectors.check(r.loss, r.grad_norm));
    if (verdict.anomaly) {
      const bool within_budget = rewinds.allow(it);
      if (!rewind(verdict)) {
        if (lead)
          std::fprintf(stderr, "error: step %lld: %s (ranks %s); there is no state to rewind to (set "
                       "resilience.snapshot_interval or checkpoint.dir): stopping without saving\n", (long long)it,
                       verdict.anomaly->describe().c_str(), fmt::format("{}", fmt::join(verdict.ranks, ",")).c_str());
        return resilience::kExitCodeDiverged;
      }
      if (!within_budget) {
        if (lead)
          std::fprintf(stderr, "error: %lld rewinds within %lld steps (resilience.max_rewinds = %lld): training "
                       "does not recover; saving the last good state with the window skipped and stopping\n",
                       (long long)rewinds.recent(), (long long)rcfg.rewind_window, (long long)rcfg.max_rewinds);
        saver.save(it, consumed, true);  // the restored state, known good
        return resilience::kExitCodeDiverged;
      }
      if (verdict.stop_signal) {
        if (lead) std::printf("received signal %d: saving and exiting\n", verdict.stop_signal);
        saver.save(it, consumed, true);
        return train::kExitCodeStopped;
      }
      continue;
    }
    // The step computed from the state before it and passed: that state is good.
    detectors.accept(r.loss, r.grad_norm);
    if (pending) {
      good.reset();  // one copy freed before the next is taken
      good = std::move(pending);
      pending.reset();
    }
    saver.after_step(true);
    const double dt = std::chrono::duration<double>(t1 - t0).count();
    const double elapsed = std::chrono::duration<double>(t1 - t_start).count();
    const double tps = double(cfg.train.global_batch_size * m.seq_length) / dt;
    const double mfu = flops_per_token * tps / 1e9 / peak_gflops;
    // elapsed_s: wall seconds since training started, at the end of this step's verdict (saves and
    // evaluation in between count; step_s is the step alone).
    const double elapsed_now = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    nlohmann::json j = {{"step", it}, {"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.grad_norm},
                        {"tokens_per_s", tps}, {"mfu", mfu}, {"step_s", dt}, {"consumed_samples", consumed},
                        {"elapsed_s", elapsed_now}};
    if (m.mtp_num_layers > 0) j["mtp_loss"] = r.mtp_loss;
    if (m.num_experts > 0) {  // load balance per MoE layer: max / mean tokens per expert (1 = even)
      j["moe_aux_loss"] = r.moe_aux_loss;
      nlohmann::json per_layer = nlohmann::json::array();
      // The MoE layers in order, the multi-token-prediction modules' after the main model's.
      for (int64_t l = m.moe_first_dense_layers; l < m.num_layers + m.mtp_num_layers; ++l)
        per_layer.push_back(r.expert_load_max_mean[size_t(l)]);
      j["expert_load_max_mean"] = per_layer;
    }
    if (lead) metrics->append(j);
    if (cfg.log.pipeline_trace && pstate.pp_size() > 1) {  // collective over each pipeline group
      const std::string trace = trainer.pipeline_trace_json();
      if (lead) train::write_run_file((std::filesystem::path(cfg.log.dir) / "pipeline_trace.json").string(), trace);
    }
    if (lead && (it % cfg.log.interval == 0 || it == cfg.train.train_iters)) {
      const double eta = elapsed / double(it - start) * double(cfg.train.train_iters - it);
      std::printf(
          "step %5lld/%lld | loss %.4f | lr %.3e | grad norm %.3f | %.0f tokens/s | MFU %.1f%% | elapsed %s | ETA %s\n",
          (long long)it, (long long)cfg.train.train_iters, r.loss, r.lr, r.grad_norm, tps, 100 * mfu,
          hms(elapsed).c_str(), hms(eta).c_str());
      std::fflush(stdout);
    }
    if (cfg.train.eval_interval > 0 && (it % cfg.train.eval_interval == 0 || it == cfg.train.train_iters)) evaluate(it);
    if (rcfg.snapshot_interval > 0 && it % rcfg.snapshot_interval == 0 && it < cfg.train.train_iters)
      pending = resilience::GoodState{trainer.snapshot(), it, consumed};
    if (verdict.stop_signal) {
      if (lead) std::printf("received signal %d: saving and exiting\n", verdict.stop_signal);
      saver.save(it, consumed, true);
      return train::kExitCodeStopped;
    }
    if (cfg.train.exit_interval > 0 && it % cfg.train.exit_interval == 0 && it < cfg.train.train_iters) {
      if (lead)
        std::printf("train.exit_interval reached at step %lld: %s\n", (long long)it,
                    cfg.checkpoint.dir.empty() ? "exiting (no checkpoint.dir: nothing saved)" : "saving and exiting");
      saver.save(it, consumed, true);
      return 0;
    }
    if (cfg.checkpoint.interval > 0 && it % cfg.checkpoint.interval == 0 && it < cfg.train.train_iters)
      saver.save(it, consumed, false);
  }
  saver.settle();  // (validated already, unless only skipped iterations followed it)
  if (it > start) saver.save(it, consumed, true);
  return 0;
}

}  // namespace

Action add_train_command(CLI::App& app) {
  auto o = std::make_shared<TrainOptions>();
  auto* cmd = app.add_subcommand("train", "Train a model from a YAML config (resumes from checkpoint.dir)");
  cmd->add_option("config", o->config, "YAML config (e.g. configs/demo.yaml, configs/synthetic.yaml)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--set", o->sets, "override a config key: section.key=value (repeatable)");
  cmd->add_option("--inject", o->inject,
                  fmt::format("inject a fault, KIND@STEP[:RANK] (repeatable; = --set resilience.inject=...; KIND: {})",
                              resilience::fault_kinds_text()));
  cmd->add_flag("--auto-parallel", o->auto_parallel,
                "train with the layout `tessel plan search` ranks fastest for this world (= --set parallel.auto=true; "
                "the profile: parallel.auto_hardware, or this machine measured at start-up)");
  cmd->footer(fmt::format("Exit status: 0 when train.train_iters (or train.exit_interval) is reached, {} when "
                          "stopped by SIGINT/SIGTERM after saving a checkpoint (requeue it), {} when rewinding did not "
                          "help (resilience.max_rewinds; do not requeue), {} when a collective timed out "
                          "(resilience.collective_timeout_s), other non-zero codes on errors.",
                          train::kExitCodeStopped, resilience::kExitCodeDiverged, comm::kExitCodeCollectiveTimeout));
  return [o] { return run_train(*o); };
}

}  // namespace tessel::app
