// tessel train CONFIG [--set k=v ...]: trains, printing one line per step and writing
// metrics.jsonl and the resolved config into log.dir.
#include <omp.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "commands.h"
#include "tessel/train/trainer.h"

namespace tessel::app {
namespace {

struct TrainOptions {
  std::string config;
  std::vector<std::string> sets;
};

std::string hms(double s) {
  const int64_t t = int64_t(s + 0.5);
  return fmt::format("{}:{:02d}:{:02d}", t / 3600, (t / 60) % 60, t % 60);
}

int run_train(const TrainOptions& o) {
  const train::Config cfg = train::Config::load(o.config, o.sets);
  TESSEL_CHECK(cfg.checkpoint.dir.empty(), "checkpoint.dir: checkpoints are not supported yet (leave it empty)");
  const auto kind = data::SyntheticData::parse(cfg.data.path);
  namespace fs = std::filesystem;
  fs::create_directories(cfg.log.dir);
  {
    std::ofstream out(fs::path(cfg.log.dir) / "config.yaml");
    out << cfg.to_yaml();
  }
  std::ofstream metrics(fs::path(cfg.log.dir) / "metrics.jsonl", std::ios::trunc);
  TESSEL_CHECK(metrics.good(), "cannot write {}/metrics.jsonl", cfg.log.dir);

  train::Trainer trainer(cfg);
  const auto& m = cfg.model;
  const int64_t mbs = cfg.train.micro_batch_size, accum = cfg.grad_accumulation_steps();
  std::printf("tessel train: %s | %s %lld layers, hidden %lld, %.2fM params, %s, global batch %lld, %d threads\n",
              o.config.c_str(), m.arch.c_str(), (long long)m.num_layers, (long long)m.hidden_size,
              double(trainer.model().params().numel()) / 1e6, cfg.precision.compute.c_str(),
              (long long)cfg.train.global_batch_size, omp_get_max_threads());
  std::printf("run directory: %s (config.yaml, metrics.jsonl)\n", cfg.log.dir.c_str());
  const data::SyntheticData data(kind, uint64_t(cfg.train.seed), m.vocab_size, m.seq_length);
  const auto start = std::chrono::steady_clock::now();
  for (int64_t it = 0; it < cfg.train.train_iters; ++it) {
    std::vector<data::Batch> mb;
    for (int64_t a = 0; a < accum; ++a) mb.push_back(data.batch((it * accum + a) * mbs, mbs));
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = trainer.step(mb, it);
    const auto t1 = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(t1 - t0).count();
    const double elapsed = std::chrono::duration<double>(t1 - start).count();
    const double tps = double(cfg.train.global_batch_size * m.seq_length) / dt;
    nlohmann::json j = {{"step", it + 1}, {"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.grad_norm},
                        {"tokens_per_s", tps}, {"step_s", dt}};
    metrics << j.dump() << "\n";
    metrics.flush();
    if ((it + 1) % cfg.log.interval == 0 || it + 1 == cfg.train.train_iters) {
      const double eta = elapsed / double(it + 1) * double(cfg.train.train_iters - it - 1);
      std::printf("step %5lld/%lld | loss %.4f | lr %.3e | grad norm %.3f | %.0f tokens/s | elapsed %s | ETA %s\n",
                  (long long)(it + 1), (long long)cfg.train.train_iters, r.loss, r.lr, r.grad_norm, tps,
                  hms(elapsed).c_str(), hms(eta).c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

Action add_train_command(CLI::App& app) {
  auto o = std::make_shared<TrainOptions>();
  auto* cmd = app.add_subcommand("train", "Train a model from a YAML config");
  cmd->add_option("config", o->config, "YAML config (e.g. configs/demo.yaml)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--set", o->sets, "override a config key: section.key=value (repeatable)");
  return [o] { return run_train(*o); };
}

}  // namespace tessel::app
