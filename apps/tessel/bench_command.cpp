// tessel bench CONFIG [--steps N] [--set k=v ...] [--profile]: trains N steps on random tokens and
// reports step time, tokens/s, model FLOPs, MFU against this machine's measured GEMM peak, peak RSS;
// under mpirun also the bytes each parallel group moves per step, the per-rank memory of parameters,
// gradients and optimizer state, and the share of data-parallel communication hidden behind backward.
// The last line printed is one JSON object (tokens_per_s, step_s, mfu, peak_rss_mb, ...).
#include <dlfcn.h>
#include <omp.h>
#include <sys/resource.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "auto_parallel.h"
#include "commands.h"
#include "gemm_peak.h"
#include "option_checks.h"
#include "run_context.h"
#include "tessel/core/block_pool.h"
#include "tessel/core/memory.h"
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

struct Group {
  const char* key;    // JSON key prefix: <key>_comm_mb_per_step
  const char* label;
  comm::Communicator* comm;  // null: this rank is in no such group
};

// One double from every rank of `c`, in rank order (gathered as 8-byte words).
std::vector<double> gather_doubles(comm::Communicator& c, double x) {
  std::vector<double> all(static_cast<size_t>(c.size()));
  c.all_gather(&x, all.data(), 1, DType::i64);
  return all;
}

// "27.4 MB", or "16 B" for the few bytes of scalar reductions (token counts, losses).
std::string megabytes(double bytes) {
  return bytes >= 5e4 ? fmt::format("{:.1f} MB", bytes / 1e6) : fmt::format("{:.0f} B", bytes);
}

// The malloc interposer bench/heap_peak/heap_peak.cpp, when preloaded (LD_PRELOAD): bytes the process
// holds from malloc by any path, measured independently of tessel's allocator accounting.
struct HeapProbe {
  using Get = int64_t (*)();
  using Reset = void (*)();
  Get live = reinterpret_cast<Get>(dlsym(RTLD_DEFAULT, "tessel_heap_live_bytes"));
  Get peak = reinterpret_cast<Get>(dlsym(RTLD_DEFAULT, "tessel_heap_peak_bytes"));
  Reset reset_peak = reinterpret_cast<Reset>(dlsym(RTLD_DEFAULT, "tessel_heap_reset_peak"));
  bool present() const { return live && peak && reset_peak; }
};

nlohmann::json bytes_by_category(const MemoryStats::PerCategory& bytes) {
  nlohmann::json j = nlohmann::json::object();
  for (int c = 0; c < kMemoryCategories; ++c)
    j[std::string(memory_category_name(MemoryCategory(c)))] = bytes[size_t(c)];
  return j;
}

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;
}

int run_bench(const BenchOptions& o) {
  TESSEL_CHECK(o.steps > 0, "--steps must be > 0, got {}", o.steps);
  auto launched = make_world();  // MPI under mpirun
  train::Config cfg = choose_auto_layout(o.config, o.sets, train::Config::load(o.config, o.sets), *launched);
  RunContext ctx = make_run_context(cfg, std::move(launched));
  const bool lead = ctx.lead;
  if (!lead && !std::freopen("/dev/null", "w", stdout)) return 2;  // rank 0 reports for everyone
  const auto& m = cfg.model;
  std::printf("tessel bench: %s | arch %s, %lld layers, hidden %lld, heads %lld/%lld, ffn %lld, vocab %lld, seq %lld\n",
              o.config.c_str(), m.arch.c_str(), (long long)m.num_layers, (long long)m.hidden_size,
              (long long)m.num_attention_heads, (long long)m.num_query_groups, (long long)m.ffn_hidden_size,
              (long long)m.vocab_size, (long long)m.seq_length);
  const auto [peak, peak_src] = lead ? gemm_peak(m.compute, o.remeasure_peak) : std::make_pair(1.0, std::string());
  // The GEMM peak measurement's operands, when it ran, went back to the tensor pool: start the pool
  // afresh (its free segments back to the heap), so the model starts from the pool as a new process
  // has it, and the pool's reserve is what a dry run of the same steps predicts (train/dry_run.h).
  Allocator& device_memory = allocator(Device::cpu);
  device_memory.start_fresh_pool();
  const HeapProbe heap;
  // What the process held before the model was built (libraries, MPI), less any free blocks the
  // tensor pool still keeps: the model's tensors would take those without a new allocation, so
  // they are part of the growth the accounting is compared with (without both, a run that measured
  // the peak covered 120% of a growth that missed the blocks, or 90.6% with their slack).
  const MemoryStats pool_before = device_memory.stats();
  const int64_t heap_before_model =
      heap.present() ? heap.live() - (pool_before.reserved - pool_before.current_total) : 0;
  train::Trainer trainer(cfg, ctx.groups.get());
  const int64_t mbs = cfg.train.micro_batch_size, accum = cfg.grad_accumulation_steps();
  std::printf("compute %s, micro batch %lld x %lld accumulation, %d threads, %.1fM parameters, recompute %s\n",
              cfg.precision.compute.c_str(), (long long)mbs, (long long)accum, omp_get_max_threads(),
              double(trainer.model().params().numel()) / 1e6, m.recompute ? "on" : "off");
  const data::SyntheticData data(data::SyntheticData::Kind::uniform, uint64_t(cfg.train.seed), m.vocab_size,
                                 m.seq_length);
  // Every parallel group whose traffic is reported (embedding: null on middle pipeline stages; dp x cp
  // only when context parallelism splits sequences, where it is the gradient reduction group).
  std::vector<Group> groups = {{"dp", "data-parallel", &ctx.groups->dp()},
                               {"tp", "tensor-parallel", &ctx.groups->tp()},
                               {"pp", "pipeline-parallel", &ctx.groups->pp()},
                               {"cp", "context-parallel", &ctx.groups->cp()},
                               {"dp_cp", "data x context-parallel", ctx.groups->cp_size() > 1 ? &ctx.groups->dp_cp() : nullptr},
                               {"embedding", "embedding", ctx.groups->embedding()},
                               {"ep", "expert-parallel", &ctx.groups->ep()},
                               {"ep_dp", "expert-data-parallel", ctx.groups->ep_size() > 1 ? &ctx.groups->ep_dp() : nullptr}};
  const bool zero = trainer.distributed_optimizer();  // distributed optimizer: gradients reduced to their shards' owners
  // Gradients are summed over the data-parallel ranks, and over the context-parallel ones as well when
  // context parallelism splits the sequences (they hold the same weights).
  comm::Communicator& grad_group = ctx.groups->cp_size() > 1 ? ctx.groups->dp_cp() : ctx.groups->dp();
  const char* grad_label = ctx.groups->cp_size() > 1 ? "data x context-parallel" : "data-parallel";
  // The exposed part of that gradient all-reduce is the wait after backward (the GradReducer's
  // "dp_grad_wait" profiler scope): the profiler is on for the measured steps then, but its table is
  // printed only with --profile.
  // Under expert parallelism the buckets are reduced unit by unit over two groups (experts and the
  // rest), which the blocking reference below does not rebuild: not timed. Otherwise the wait is: for
  // the buckets during backward, or all of the reduction after it (parallel.overlap_grad_reduce=false,
  // or the distributed optimizer with an embedding tied across pipeline stages).
  const bool by_units = ctx.groups->ep_size() > 1;  // expert parallelism
  const bool time_dp_wait = grad_group.size() > 1 && !by_units;
  std::vector<double> times;
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    std::vector<data::Batch> mbs_list;
    for (int64_t a = 0; a < accum / ctx.dp; ++a)
      mbs_list.push_back(data.batch(ctx.micro_batch_index(s, accum, a) * mbs, mbs));
    const bool measured = s >= o.warmup;
    if (s == o.warmup) {  // count the measured steps only
      for (const auto& g : groups)
        if (g.comm) g.comm->reset_stats();
      device_memory.reset_peak();
      if (heap.present()) heap.reset_peak();
    }
    Profiler::get().enabled = (o.profile || time_dp_wait) && measured;
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = trainer.step(mbs_list, s);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // The GEMM primitives and free pool blocks held: both must level off in long runs (MoE included).
    std::printf("%s step %d: %.4f s, loss %.4f, %zu GEMM primitives, %.1f MB pooled\n", measured ? "bench" : "warm-up",
                s, dt, r.loss, kernels::gemm_cached_primitives(), double(tensor_pool_stats().cached_bytes) / 1e6);
    if (measured) times.push_back(dt);
  }
  Profiler::get().enabled = false;
  // Tensor memory accounted by the cpu allocator over the measured steps (model state included), and,
  // with the interposer, the real heap over the same steps above what the process held before the
  // model was built: the share of it the accounting covers exposes memory that bypasses the
  // allocator (library scratchpads, staging vectors, free blocks the pool keeps).
  const MemoryStats mem = device_memory.stats();
  nlohmann::json heap_growth = nullptr, coverage = nullptr, reserved_coverage = nullptr;
  // The reserve's peak: each category's bytes in use then, and the pool's free blocks (its slack).
  nlohmann::json reserved_by_category = bytes_by_category(mem.at_peak_reserved);
  reserved_by_category["pool_free"] = mem.peak_reserved - std::accumulate(mem.at_peak_reserved.begin(),
                                                                          mem.at_peak_reserved.end(), int64_t(0));
  std::printf("accounted peak %.2f MB (", double(mem.peak_total) / 1e6);
  for (int c = 0; c < kMemoryCategories; ++c)
    std::printf("%s%s %.2f", c ? ", " : "", std::string(memory_category_name(MemoryCategory(c))).c_str(),
                double(mem.at_peak[size_t(c)]) / 1e6);
  std::printf(" MB at the peak)");
  if (heap.present()) {
    const int64_t growth = heap.peak() - heap_before_model;
    heap_growth = growth;
    coverage = growth > 0 ? double(mem.peak_total) / double(growth) : 1.0;
    reserved_coverage = growth > 0 ? double(mem.peak_reserved) / double(growth) : 1.0;
    std::printf(" of %.2f MB real heap growth (%.1f%%; with the pool's free blocks, peak %.2f MB: %.1f%%)",
                double(growth) / 1e6, 100 * coverage.get<double>(), double(mem.peak_reserved) / 1e6,
                100 * double(mem.peak_reserved) / double(growth));
  }
  std::printf("\n");
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
  // 2(n-1)/n x size, reduce-scatter and all-to-all (n-1)/n x input, all-gather (n-1) x own block;
  // point-to-point sends as they are). Rank 0 prints its own breakdown and the largest rank's total
  // (pipeline stages differ: the first sends activations only, middle ones gradients too).
  comm::Communicator& world = *ctx.world;
  const double steps = double(times.size());
  nlohmann::json comm_json = nlohmann::json::object();  // <group>_comm_mb_per_step (rank 0) and _max
  for (const auto& g : groups) {
    double moved = 0;
    std::string detail;
    if (g.comm && g.comm->size() > 1) {
      const double n = double(g.comm->size());
      for (const auto& [kind, st] : g.comm->stats()) {
        const double payload = double(st.bytes) / steps;
        // A reduce to one root moves what a reduce-scatter moves per element: the distributed
        // optimizer's per-bucket reduces add up to one reduce-scatter of the gradients.
        const double factor = kind == "all_reduce"                                  ? 2 * (n - 1) / n
                              : kind == "reduce_scatter" || kind == "all_to_all" || kind == "reduce" ? (n - 1) / n
                              : kind == "all_gather"                                ? n - 1
                                                                                    : 1.0;
        moved += payload * factor;
        detail += fmt::format(" {} {} payload ({} calls);", kind, megabytes(payload),
                              static_cast<long long>(std::llround(double(st.calls) / steps)));
      }
    }
    const auto all = gather_doubles(world, moved);  // collective: every rank, every group
    const double max_moved = *std::max_element(all.begin(), all.end());
    const int size = g.comm ? g.comm->size() : 1;
    if (size > 1 || max_moved > 0) {
      std::printf("%s group of %d ranks, per step:%s ring estimate %.1f MB moved by rank 0", g.label, size,
                  detail.empty() ? " no traffic on rank 0;" : detail.c_str(), moved / 1e6);
      if (max_moved > moved * 1.001) std::printf(" (largest rank %.1f MB)", max_moved / 1e6);
      std::printf("\n");
    }
    comm_json[fmt::format("{}_comm_mb_per_step", g.key)] = moved / 1e6;
    comm_json[fmt::format("{}_comm_mb_per_step_max", g.key)] = max_moved / 1e6;
  }

  // Per-rank memory of the model state, exact byte counts from the sizes: fp32 master parameters
  // (whole, or in bf16 runs with the distributed optimizer the owned 1/dp of them plus a whole fp32
  // copy of what computes in fp32: nn/params.h) plus their bf16 copy when computing in bf16; fp32
  // gradients of every local parameter; Adam m and v (fp32) of the range this rank's optimizer owns
  // (all local parameters, or 1/dp of them with the distributed optimizer). Activations and
  // workspaces are not included (peak RSS is the whole process).
  const nn::ParamStore& store = trainer.model().params();
  const int64_t local = store.numel();
  const int64_t owned = trainer.optimizer().owned().local_numel();
  const int64_t masters = store.masters_sharded() ? owned + store.f32_copy().numel() : local;
  const double param_bytes =
      double(masters) * 4.0 + double(local) * (m.compute == DType::f32 ? 0.0 : double(dtype_size(m.compute)));
  const double grad_bytes = double(local) * 4.0;
  const double opt_bytes = double(owned) * 2 * 4.0;
  const auto max_of = [&](double x) {
    const auto all = gather_doubles(world, x);
    return *std::max_element(all.begin(), all.end());
  };
  const double param_max = max_of(param_bytes), grad_max = max_of(grad_bytes), opt_max = max_of(opt_bytes);
  std::printf("model state per rank: parameters %.2f MB (fp32 masters%s%s), gradients %.2f MB (fp32), optimizer state "
              "%.2f MB (Adam m, v in fp32 for %lld of %lld local parameters%s)",
              param_bytes / 1e6, store.masters_sharded() ? " of the owned shard + fp32 copy of what computes in fp32" : "",
              m.compute == DType::f32 ? "" : " + bf16 copy", grad_bytes / 1e6, opt_bytes / 1e6,
              static_cast<long long>(owned), static_cast<long long>(local), zero ? ": distributed optimizer" : "");
  if (param_max > param_bytes || grad_max > grad_bytes || opt_max > opt_bytes)
    std::printf("; largest rank: %.2f, %.2f, %.2f MB", param_max / 1e6, grad_max / 1e6, opt_max / 1e6);
  std::printf("\n");
  // What one micro-batch's forward keeps for backward (one process holding the whole model; FP8
  // Linears keep their inputs in FP8): measured from the saved tensors themselves.
  nlohmann::json activation_mb = nullptr;
  if (world.size() == 1) {
    const data::Batch b = data.batch(0, mbs);
    nn::Activations saved;
    trainer.model().forward(b.tokens, b.targets, 0.0f, saved);
    activation_mb = double(saved.bytes()) / 1e6;
    std::printf("activations saved for backward: %.2f MB per micro-batch of %lld x %lld tokens\n",
                double(saved.bytes()) / 1e6, static_cast<long long>(mbs), static_cast<long long>(m.seq_length));
  }

  // The share of data-parallel communication hidden behind backward: the exposed time is the wait
  // for the gradient reduction after backward; the time it would take if not overlapped is
  // measured now with the same collectives alone, blocking: all-reduces of the same buckets
  // (ddp_bucket_size elements), with the distributed optimizer each bucket's parts reduced to
  // their owners, or its one reduce-scatter when it does not overlap; on the same group, every
  // group at once as in training (median of 5 after one warm-up). Both are the mean over all ranks;
  // the wait also holds any lag of the slowest replica's backward, so the share is a lower bound.
  nlohmann::json dp_exposed = nullptr, dp_blocking = nullptr, dp_hidden = nullptr;
  if (grad_group.size() > 1 && by_units) {
    std::printf("%s communication hidden behind backward: not measured under expert parallelism (each bucket is "
                "reduced unit by unit, experts over the expert-data-parallel group; the profiler's dp_grad_wait "
                "with --profile is the exposed part)\n", grad_label);
  } else if (time_dp_wait) {
    const auto it = Profiler::get().stats.find("dp_grad_wait");
    const double exposed_rank = it == Profiler::get().stats.end() ? 0.0 : it->second.seconds / steps;
    auto& ps = trainer.model().params();
    ps.zero_grads();  // the step is over; reduce zeros in place (no extra memory, values stay 0)
    const int64_t bucket = cfg.parallel.ddp_bucket_size;
    std::vector<double> reps;
    float* g = static_cast<float*>(ps.grads_flat().device_ptr());
    const std::vector<int64_t> owned_counts = nn::ParamStore::shard_counts(local, grad_group.size());
    // The distributed optimizer without per-bucket reduces: one reduce-scatter into its shard.
    const bool whole = zero && !trainer.buckets_reduce_grads();
    Tensor mine;
    if (whole) {
      MemoryCategoryScope tag(MemoryCategory::communication);
      mine = Tensor::empty({owned_counts[size_t(grad_group.rank())]}, DType::f32);
    }
    for (int r = 0; r < 6; ++r) {
      world.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      if (whole) grad_group.reduce_scatter_v(g, mine.device_ptr(), owned_counts, DType::f32, comm::ReduceOp::sum);
      for (int64_t b = 0; b < local && !whole; b += bucket) {
        const int64_t e = std::min(local, b + bucket);
        if (!zero) {
          grad_group.all_reduce(g + b, e - b, DType::f32, comm::ReduceOp::sum);
          continue;
        }
        // The distributed optimizer: the bucket's part owned by each rank, reduced to it.
        int64_t owner_begin = 0;
        for (int owner = 0; owner < grad_group.size(); ++owner) {
          const int64_t lo = std::max(b, owner_begin), hi = std::min(e, owner_begin + owned_counts[size_t(owner)]);
          if (lo < hi) grad_group.reduce_async(g + lo, hi - lo, DType::f32, comm::ReduceOp::sum, owner)->wait();
          owner_begin += owned_counts[size_t(owner)];
        }
      }
      if (r > 0) reps.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(reps.begin(), reps.end());
    const double ranks = double(world.size());
    const double exposed = comm::sum_in_rank_order(world, exposed_rank) / ranks;
    const double blocking = comm::sum_in_rank_order(world, reps[reps.size() / 2]) / ranks;
    const double hidden = blocking > 0 ? std::clamp(1.0 - exposed / blocking, 0.0, 1.0) : 0.0;
    dp_exposed = exposed;
    dp_blocking = blocking;
    dp_hidden = hidden;
    std::printf("%s communication per step (mean over ranks): %.4f s exposed (wait after backward) of "
                "%.4f s blocking (same all-reduces alone) -> %.0f%% hidden behind backward\n",
                grad_label, exposed, blocking, 100 * hidden);
  }

  // (After the collectives above were counted.) The JSON is rank 0's: a pipeline's ranks hold
  // different amounts (under the zero-bubble schedules the last stage holds the most), so the peaks
  // also go out as the most any rank held, which is what `tessel plan estimate` predicts (max over
  // ranks). -1: no heap interposer.
  std::array<int64_t, 3> most{mem.peak_total, mem.peak_reserved, heap.present() ? heap_growth.get<int64_t>() : -1};
  ctx.world->all_reduce(most.data(), int64_t(most.size()), DType::i64, comm::ReduceOp::max);
  nlohmann::json j = {{"config", o.config},
                      {"world_size", ctx.world->size()},
                      {"data_parallel", ctx.dp},
                      {"tensor_parallel", ctx.groups->tp_size()},
                      {"pipeline_parallel", ctx.groups->pp_size()},
                      {"virtual_pipeline_parallel", cfg.parallel.virtual_pipeline_model_parallel_size},
                      {"context_parallel", ctx.groups->cp_size()},
                      {"distributed_optimizer", zero},
                      {"compute", cfg.precision.compute},
                      {"threads", omp_get_max_threads()},
                      {"steps", o.steps},
                      {"step_s", step_s},
                      {"tokens_per_s", tps},
                      {"flops_per_token", flops_tok},
                      {"gflops", gflops},
                      {"gemm_peak_gflops", peak},
                      {"gemm_peak_source", peak_src},
                      {"gemm_primitives_cached", kernels::gemm_cached_primitives()},
                      {"pool_cached_mb", double(tensor_pool_stats().cached_bytes) / 1e6},
                      {"mfu", mfu},
                      {"peak_rss_mb", rss},
                      {"accounted_peak_bytes", mem.peak_total},
                      {"accounted_peak_bytes_by_category", bytes_by_category(mem.at_peak)},
                      {"accounted_peak_reserved_bytes", mem.peak_reserved},
                      {"accounted_peak_reserved_bytes_by_category", reserved_by_category},
                      {"accounted_reserved_heap_coverage", reserved_coverage},
                      {"heap_peak_growth_bytes", heap_growth},
                      {"accounted_heap_coverage", coverage},
                      {"accounted_peak_bytes_max_over_ranks", most[0]},
                      {"accounted_peak_reserved_bytes_max_over_ranks", most[1]},
                      {"heap_peak_growth_bytes_max_over_ranks", most[2] >= 0 ? nlohmann::json(most[2]) : nlohmann::json()},
                      {"params", local},
                      {"param_mb", param_bytes / 1e6},
                      {"activation_mb_per_micro_batch", activation_mb},
                      {"fp8_recipe", cfg.precision.fp8_recipe},
                      {"grad_mb", grad_bytes / 1e6},
                      {"optimizer_state_mb", opt_bytes / 1e6},
                      {"param_mb_max", param_max / 1e6},
                      {"grad_mb_max", grad_max / 1e6},
                      {"optimizer_state_mb_max", opt_max / 1e6},
                      {"dp_comm_exposed_s", dp_exposed},
                      {"dp_comm_blocking_s", dp_blocking},
                      {"dp_comm_hidden_share", dp_hidden}};
  j.update(comm_json);
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace

Action add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  auto* cmd = app.add_subcommand("bench", "Benchmark training steps on random tokens (throughput, MFU, memory)");
  cmd->add_option("config", o->config, "YAML config (configs/bench/*.yaml)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--steps", o->steps, "measured steps (median is reported)")->capture_default_str();
  cmd->add_option("--warmup", o->warmup, "unmeasured warm-up steps")->capture_default_str()->check(integer_at_least(0));
  cmd->add_option("--set", o->sets, "override a config key: section.key=value (repeatable)");
  cmd->add_flag("--profile", o->profile, "print a per-operator time breakdown");
  cmd->add_flag("--remeasure-peak", o->remeasure_peak, "measure the GEMM peak again instead of using the cache");
  return [o] { return run_bench(*o); };
}

}  // namespace tessel::app
