// tessel bench CONFIG [--steps N] [--set k=v ...] [--profile]: trains N steps on random tokens and
// reports step time, tokens/s, model FLOPs, MFU against this machine's measured GEMM peak, peak RSS.
// The last line printed is one JSON object (tokens_per_s, step_s, mfu, peak_rss_mb, ...).
#include <omp.h>
#include <sys/resource.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "commands.h"
#include "gemm_peak.h"
#include "run_context.h"
#include "tessel/core/profiler.h"
#include "tessel/kernels/gemm.h"
#include "tessel/train/trainer.h"

namespace tessel::app {
namespace {

struct BenchOptions {
  std::string config;
  std::vector<std::string> sets;
  int steps = 5;
  int warmup = 1;
  bool profile = false;
  bool remeasure_peak = false;
};

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;
}

int run_bench(const BenchOptions& o) {
  train::Config cfg = train::Config::load(o.config, o.sets);
  TESSEL_CHECK(o.steps > 0, "--steps must be > 0, got {}", o.steps);
  RunContext ctx = make_run_context(cfg);  // data-parallel under mpirun
  const bool lead = ctx.lead;
  if (!lead && !std::freopen("/dev/null", "w", stdout)) return 2;  // rank 0 reports for everyone
  const auto& m = cfg.model;
  std::printf("tessel bench: %s | arch %s, %lld layers, hidden %lld, heads %lld/%lld, ffn %lld, vocab %lld, seq %lld\n",
              o.config.c_str(), m.arch.c_str(), (long long)m.num_layers, (long long)m.hidden_size,
              (long long)m.num_attention_heads, (long long)m.num_query_groups, (long long)m.ffn_hidden_size,
              (long long)m.vocab_size, (long long)m.seq_length);
  const auto [peak, peak_src] = lead ? gemm_peak(m.compute, o.remeasure_peak) : std::make_pair(1.0, std::string());
  train::Trainer trainer(cfg, ctx.groups.get());
  const int64_t mbs = cfg.train.micro_batch_size, accum = cfg.grad_accumulation_steps();
  std::printf("compute %s, micro batch %lld x %lld accumulation, %d threads, %.1fM parameters, recompute %s\n",
              cfg.precision.compute.c_str(), (long long)mbs, (long long)accum, omp_get_max_threads(),
              double(trainer.model().params().numel()) / 1e6, m.recompute ? "on" : "off");
  const data::SyntheticData data(data::SyntheticData::Kind::uniform, uint64_t(cfg.train.seed), m.vocab_size,
                                 m.seq_length);
  std::vector<double> times;
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    std::vector<data::Batch> mbs_list;
    for (int64_t a = 0; a < accum / ctx.dp; ++a)
      mbs_list.push_back(data.batch(ctx.micro_batch_index(s, accum, a) * mbs, mbs));
    const bool measured = s >= o.warmup;
    if (s == o.warmup) {  // count the measured steps only
      ctx.groups->dp().reset_stats();
      ctx.groups->tp().reset_stats();
    }
    Profiler::get().enabled = o.profile && measured;
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = trainer.step(mbs_list, s);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s step %d: %.4f s, loss %.4f\n", measured ? "bench" : "warm-up", s, dt, r.loss);
    if (measured) times.push_back(dt);
  }
  Profiler::get().enabled = false;
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  const double step_s = sorted[sorted.size() / 2];
  const double tokens = double(mbs * accum * m.seq_length);
  const double tps = tokens / step_s;
  const double flops_tok = m.train_flops_per_token();
  const double gflops = flops_tok * tps / 1e9;
  const double mfu = gflops / (peak * double(ctx.world->size()));  // per device
  const double rss = peak_rss_mb();
  std::printf("median step %.4f s | %.1f tokens/s | %.3g model FLOPs/token | %.1f GFLOP/s | GEMM peak %.1f GFLOP/s "
              "(%s, %s) | MFU %.1f%% | peak RSS %.0f MB\n",
              step_s, tps, flops_tok, gflops, peak, std::string(dtype_name(m.compute)).c_str(), peak_src.c_str(),
              100 * mfu, rss);
  if (o.profile) {
    const double total = std::accumulate(times.begin(), times.end(), 0.0);
    std::printf("\n%-16s %8s %10s %8s %12s %8s\n", "operator", "calls", "time s", "% step", "GFLOP/s", "% peak");
    std::vector<std::pair<std::string, OpStat>> rows(Profiler::get().stats.begin(), Profiler::get().stats.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
    double accounted = 0;
    for (const auto& [op, st] : rows) {
      accounted += st.seconds;
      const double gf = st.flops > 0 ? st.flops / st.seconds / 1e9 : 0;
      std::printf("%-16s %8lld %10.4f %7.1f%% %12s %8s\n", op.c_str(), (long long)(st.calls / int64_t(times.size())),
                  st.seconds / double(times.size()), 100 * st.seconds / total,
                  gf > 0 ? fmt::format("{:.1f}", gf).c_str() : "-",
                  gf > 0 ? fmt::format("{:.1f}%", 100 * gf / peak).c_str() : "-");
    }
    std::printf("%-16s %8s %10.4f %7.1f%%\n\n", "(other)", "", (total - accounted) / double(times.size()),
                100 * (total - accounted) / total);
  }
  // Communication per step of each parallel group: the payload this rank handed to each kind of
  // collective, and the bytes a ring algorithm moves per rank for it (REFERENCE.md: all-reduce
  // 2(n-1)/n x size, reduce-scatter (n-1)/n x input, all-gather (n-1) x own block).
  auto traffic = [&](const char* label, comm::Communicator& g) {
    double moved = 0;
    if (g.size() <= 1) return moved;
    const double n = double(g.size()), steps = double(times.size());
    std::printf("%s group of %d ranks, per step:", label, g.size());
    for (const auto& [kind, st] : g.stats()) {
      const double payload = double(st.bytes) / steps;
      const double factor = kind == "all_reduce" ? 2 * (n - 1) / n
                            : kind == "reduce_scatter" ? (n - 1) / n
                            : kind == "all_gather" ? n - 1
                                                     : 1.0;
      moved += payload * factor;
      std::printf(" %s %.1f MB payload (%lld calls);", kind.c_str(), payload / 1e6, (long long)(st.calls / int64_t(steps)));
    }
    std::printf(" ring estimate %.1f MB moved per rank\n", moved / 1e6);
    return moved;
  };
  const double moved = traffic("data-parallel", ctx.groups->dp());
  const double tp_moved = traffic("tensor-parallel", ctx.groups->tp());
  nlohmann::json j = {{"config", o.config},
                      {"world_size", ctx.world->size()},
                      {"data_parallel", ctx.dp},
                      {"dp_comm_mb_per_step", moved / 1e6},
                      {"tensor_parallel", ctx.groups->tp_size()},
                      {"tp_comm_mb_per_step", tp_moved / 1e6},
                      {"compute", cfg.precision.compute},
                      {"threads", omp_get_max_threads()},
                      {"steps", o.steps},
                      {"step_s", step_s},
                      {"tokens_per_s", tps},
                      {"flops_per_token", flops_tok},
                      {"gflops", gflops},
                      {"gemm_peak_gflops", peak},
                      {"mfu", mfu},
                      {"peak_rss_mb", rss},
                      {"params", trainer.model().params().numel()}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace

Action add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  auto* cmd = app.add_subcommand("bench", "Benchmark training steps on random tokens (throughput, MFU, memory)");
  cmd->add_option("config", o->config, "YAML config (configs/bench/*.yaml)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--steps", o->steps, "measured steps (median is reported)")->capture_default_str();
  cmd->add_option("--warmup", o->warmup, "unmeasured warm-up steps")->capture_default_str();
  cmd->add_option("--set", o->sets, "override a config key: section.key=value (repeatable)");
  cmd->add_flag("--profile", o->profile, "print a per-operator time breakdown");
  cmd->add_flag("--remeasure-peak", o->remeasure_peak, "measure the GEMM peak again instead of using the cache");
  return [o] { return run_bench(*o); };
}

}  // namespace tessel::app
