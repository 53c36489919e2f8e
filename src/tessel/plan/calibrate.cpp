#include "tessel/plan/calibrate.h"

#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <fmt/ranges.h>

#include "tessel/comm/parallel_state.h"
#include "tessel/core/check.h"
#include "tessel/core/cpu_model.h"
#include "tessel/core/device.h"
#include "tessel/kernels/cast.h"
#include "tessel/kernels/fp8_gemm.h"
#include "tessel/kernels/gemm.h"
#include "tessel/plan/cost_model.h"
#include "tessel/train/dry_run.h"

namespace tessel::plan {
namespace {

using Clock = std::chrono::steady_clock;

// The median of `v` (not empty; reordered): of an even count the upper middle value.
double upper_median(std::vector<double>& v) {
  std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// The last-level cache of the cpus this process may run on, in bytes: each distinct L3 counted
// once (/sys/devices/system/cpu/cpuN/cache/index3: its shared_cpu_list names it, size its bytes),
// so a machine with one L3 per core complex counts them all; sysconf's one L3 where sysfs says
// nothing, 0 where neither does.
int64_t last_level_cache_bytes() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (::sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return std::max(::sysconf(_SC_LEVEL3_CACHE_SIZE), 0L);
  std::map<std::string, int64_t> caches;  // shared_cpu_list -> bytes
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed)) continue;
    const std::string dir = fmt::format("/sys/devices/system/cpu/cpu{}/cache/index3/", cpu);
    std::ifstream shared(dir + "shared_cpu_list"), size(dir + "size");
    std::string who, kib;
    if (!(shared >> who) || !(size >> kib) || kib.empty()) continue;
    const int64_t scale = kib.back() == 'K' ? 1024 : kib.back() == 'M' ? 1024 * 1024 : 1;
    caches[who] = std::atoll(kib.c_str()) * scale;
  }
  int64_t total = 0;
  for (const auto& [who, bytes] : caches) total += bytes;
  return total > 0 ? total : std::max(::sysconf(_SC_LEVEL3_CACHE_SIZE), 0L);
}

// Evicts this machine's caches: a walk (an add, on every thread) over twice the last-level caches
// (all of them, at least 64 MiB). A training step's GEMMs read their operands from memory: between
// two uses of a weight the rest of the step's tensors, far more than the caches hold, pass through
// them. The grid times each GEMM after an eviction for that reason; timed repeated on operands left
// in cache, it priced mixtral-tiny's expert GEMMs (about 250 x 128 x 512) at 0.5-0.75 of their time
// in a step. Not measured: under mpirun, one rank's walk beside another rank's timed GEMM (the ranks
// are not in step here); and whether each thread's share of the walk covers its own core complex's
// cache where there are several (threads spread over them evenly do).
class CacheEvictor {
 public:
  CacheEvictor() : walk_(Tensor::zeros({std::max(int64_t(64) << 20, 2 * last_level_cache_bytes()) / 4}, DType::f32)) {}
  void operator()() const { kernels::add(walk_, walk_, walk_); }

 private:
  Tensor walk_;
};

// An FP8 operand of `shape` as fp8_gemm takes it: e4m3 codes with a per-tensor scale (the delayed
// and current recipes' scaling; on the cpu a block recipe's decode differs only in reading one
// scale per 128 elements, a memory-bound cost beside the GEMM's).
kernels::Fp8Tensor fp8_operand(const Shape& shape) {
  kernels::Fp8Tensor t{Tensor::zeros(shape, DType::e4m3), Tensor::zeros({1}, DType::f32), kernels::Fp8Scaling::tensor};
  t.scale_inv.fill(1.0);
  return t;
}

// The GEMM grid: {128, 512, 2048}^3 x variants, per compute kind: gemm.bf16, gemm.f32 and fp8_gemm
// (on the cpu emulated: the operands decoded to bf16, then the bf16 GEMM). Each kind's peak is its
// fastest point, its efficiencies relative to that.
void measure_gemms(comm::Communicator& world, HardwareProfile& p, int repeats) {
  const CacheEvictor evict;
  const std::vector<int64_t> sizes = {128, 512, 2048};
  struct Variant {
    bool ta, tb, acc;
  };
  const std::vector<Variant> variants = {{false, true, false}, {false, false, false}, {true, false, true}};
  for (const std::string kind : {"gemm.bf16", "gemm.f32", "fp8_gemm"}) {
    std::vector<ShapePoint> points;
    std::vector<double> flops_per_s;
    for (const int64_t M : sizes)
      for (const int64_t N : sizes)
        for (const int64_t K : sizes)
          for (const Variant& v : variants) {
            const Shape sa = v.ta ? Shape{K, M} : Shape{M, K}, sb = v.tb ? Shape{N, K} : Shape{K, N};
            const Tensor c = Tensor::zeros({M, N}, DType::f32);
            double t = 0;
            if (kind == "fp8_gemm") {
              const kernels::Fp8Tensor a = fp8_operand(sa), b = fp8_operand(sb);
              t = typical_seconds_in_step(world, repeats, [&] { kernels::fp8_gemm(a, v.ta, b, v.tb, c, v.acc); }, evict);
            } else {
              const DType dt = kind == "gemm.bf16" ? DType::bf16 : DType::f32;
              const Tensor a = Tensor::zeros(sa, dt), b = Tensor::zeros(sb, dt);
              t = typical_seconds_in_step(world, repeats, [&] { kernels::matmul(a, v.ta, b, v.tb, c, v.acc, Tensor()); }, evict);
            }
            points.push_back({{double(M), double(N), double(K)}, kernels::gemm_variant(v.ta, v.tb, v.acc), 0});
            flops_per_s.push_back(2.0 * double(M) * double(N) * double(K) / t);
          }
    const double peak = *std::max_element(flops_per_s.begin(), flops_per_s.end());
    ComputeOpProfile c;
    c.peak_flops = peak;
    double sum = 0;
    for (size_t i = 0; i < points.size(); ++i) {
      points[i].efficiency = flops_per_s[i] / peak;
      sum += points[i].efficiency;
    }
    c.efficiency.fallback = sum / double(points.size());
    c.efficiency.points = std::move(points);
    p.compute[kind] = std::move(c);
  }
}

void measure_memory(comm::Communicator& world, HardwareProfile& p, int repeats) {
  const int64_t big = int64_t(1) << 24;  // 64 MiB per operand
  const Tensor a = Tensor::zeros({big}, DType::f32), b = Tensor::zeros({big}, DType::f32);
  const double t = typical_seconds_in_step(world, repeats, [&] { kernels::add(a, b, a); });
  p.memory_bandwidth = 3.0 * 4.0 * double(big) / t;
  const Tensor s = Tensor::zeros({16}, DType::f32);
  std::vector<double> small;
  for (int i = 0; i < 200; ++i) small.push_back(typical_seconds_in_step(world, 1, [&] { kernels::add(s, s, s); }));
  p.kernel_latency_s = upper_median(small);
}

// The calibration models: fixed here, small enough for a few seconds a step on 2 cores.
const char* kCalibrationModels[] = {
    "model:\n  arch: llama\n  num_layers: 2\n  hidden_size: 320\n  num_attention_heads: 5\n  num_query_groups: 5\n"
    "  ffn_hidden_size: 896\n  vocab_size: 3072\n  seq_length: 192\n"
    "train:\n  micro_batch_size: 2\n  global_batch_size: 2\nprecision:\n  compute: bf16\n",
    "model:\n  arch: mixtral\n  num_layers: 2\n  hidden_size: 192\n  num_attention_heads: 6\n  num_query_groups: 2\n"
    "  ffn_hidden_size: 384\n  num_experts: 6\n  moe_router_topk: 2\n  vocab_size: 1536\n  seq_length: 320\n"
    "train:\n  micro_batch_size: 1\n  global_batch_size: 1\nprecision:\n  compute: bf16\n",
    "model:\n  arch: deepseek_v3\n  num_layers: 2\n  hidden_size: 160\n  num_attention_heads: 4\n"
    "  num_query_groups: 4\n  ffn_hidden_size: 320\n  q_lora_rank: 96\n  kv_lora_rank: 64\n  qk_head_dim: 32\n"
    "  qk_pos_emb_head_dim: 16\n  v_head_dim: 32\n  num_experts: 4\n  moe_router_topk: 2\n  moe_ffn_hidden_size: 128\n"
    "  moe_shared_expert_intermediate_size: 128\n  moe_first_dense_layers: 1\n  vocab_size: 1024\n  seq_length: 128\n"
    "train:\n  micro_batch_size: 2\n  global_batch_size: 2\nprecision:\n  compute: bf16\n",
    // FP8, per-tensor (delayed) and DeepSeek-V3's blocks: the quantisation kernels of each.
    "model:\n  arch: llama\n  num_layers: 2\n  hidden_size: 256\n  num_attention_heads: 4\n  num_query_groups: 4\n"
    "  ffn_hidden_size: 768\n  vocab_size: 2048\n  seq_length: 128\n"
    "train:\n  micro_batch_size: 2\n  global_batch_size: 2\nprecision:\n  compute: bf16\n  fp8:\n    recipe: delayed\n",
    "model:\n  arch: llama\n  num_layers: 2\n  hidden_size: 256\n  num_attention_heads: 4\n  num_query_groups: 4\n"
    "  ffn_hidden_size: 768\n  vocab_size: 2048\n  seq_length: 128\n"
    "train:\n  micro_batch_size: 2\n  global_batch_size: 2\nprecision:\n  compute: bf16\n  fp8:\n    recipe: block\n",
};

// Every op family other than the GEMMs, timed inside real training steps: per distinct call
// (family, shapes) the median of its calls after the first step (whose calls are cold; of an even
// count the upper middle one, as typical_seconds_in_step takes it: a call made once a step is the
// slower of its two), then per family
// efficiency = its bytes (attention: FLOPs) over its time less the kernel latency. And the host's
// time between kernels (dispatch, allocation, the modules' own code): the last step's wall time less
// its kernels' times, per kernel call, over all the models.
void measure_step_kernels(HardwareProfile& p) {
  struct Sum {
    double work = 0, seconds = 0;
  };
  std::map<std::string, Sum> memory_ops;
  std::vector<std::pair<kernels::OpRecord, double>> attention;
  double host_seconds = 0;
  int64_t host_calls = 0;
  for (const char* yaml : kCalibrationModels) {
    const train::Config cfg = train::Config::from_yaml_text(yaml, {}, "calibration model");
    auto local = comm::make_local_communicator();
    comm::ParallelState groups(*local, cfg.parallel_sizes());
    const train::StepMeasurement m = [&] {
      const kernels::OpTimingScope timed;
      return train::measure_training_step(cfg, groups, Device::cpu, 3, nullptr, true);
    }();
    TESSEL_CHECK(m.records_at_step_end.size() >= 2, "calibrate: a calibration model ran {} steps, needs 2",
                 m.records_at_step_end.size());
    const size_t last_begin = m.records_at_step_end.end()[-2], last_end = m.records_at_step_end.back();
    double kernel_seconds = 0;
    for (size_t i = last_begin; i < last_end; ++i) {
      TESSEL_CHECK(m.op_records[i].seconds >= 0, "calibrate: a {} call was not timed", m.op_records[i].op);
      kernel_seconds += m.op_records[i].seconds;
      host_calls += m.op_records[i].count;
    }
    host_seconds += std::max(0.0, m.step_seconds.back() - kernel_seconds);
    // By family and shapes: the call, and the times of its calls after the first step.
    std::map<std::string, std::pair<kernels::OpRecord, std::vector<double>>> calls;
    for (size_t i = m.records_at_step_end.front(); i < m.records_at_step_end.back(); ++i) {
      const kernels::OpRecord& r = m.op_records[i];
      if (r.seconds < 0 || r.op == "gemm" || r.op == "fp8_gemm") continue;
      std::string key = fmt::format("{} {}", r.op, r.variant);
      for (size_t k = 0; k < r.operands.size(); ++k) key += fmt::format(" [{}]", fmt::join(r.operands.shape(k), ","));
      auto it = calls.try_emplace(key, r, std::vector<double>{}).first;
      it->second.second.push_back(r.seconds);
    }
    for (auto& [key, rec] : calls) {
      const double typical = upper_median(rec.second);
      // Less the latency, but never below half the call: a call shorter than the latency measured
      // elsewhere says the latency varies, not that the kernel is infinitely fast.
      const double t = std::max(typical - p.kernel_latency_s, 0.5 * typical);
      if (compute_kind(rec.first).empty()) {
        Sum& s = memory_ops[std::string(rec.first.op)];
        s.work += double(rec.first.bytes_read + rec.first.bytes_written);
        s.seconds += t;
      } else {
        attention.emplace_back(rec.first, t);
      }
    }
  }
  double work = 0, seconds = 0;
  for (const auto& [op, s] : memory_ops) {
    if (s.work <= 0) continue;
    p.memory[op].efficiency = std::min(50.0, s.work / s.seconds / p.memory_bandwidth);  // cached data: above 1
    work += s.work;
    seconds += s.seconds;
  }
  p.memory["default"].efficiency = seconds > 0 ? work / seconds / p.memory_bandwidth : 1.0;
  p.host_seconds_per_kernel = host_calls > 0 ? host_seconds / double(host_calls) : 0.0;
  // Attention runs in fp32 on the cpu: its efficiency is relative to the f32 GEMM peak.
  const double peak = p.compute.at("gemm.f32").peak_flops;
  for (const char* kind : {"attention_fwd", "attention_bwd"}) {
    ComputeOpProfile c;
    c.peak_flops = peak;
    double sum = 0;
    for (const auto& [r, t] : attention) {
      if (compute_kind(r) != kind) continue;
      const double eff = std::min(1.0, r.flops / t / peak);
      c.efficiency.points.push_back({efficiency_dims(r), "", eff});
      sum += eff;
    }
    TESSEL_CHECK(!c.efficiency.points.empty(), "calibrate: the calibration models made no {} call", kind);
    c.efficiency.fallback = sum / double(c.efficiency.points.size());
    p.compute[kind] = std::move(c);
  }
}

// One kind of collective over message sizes; a line t = fixed + bus bytes / bandwidth, fitted by
// least squares in relative error.
CollectiveProfile fit_collective(comm::Communicator& w, const std::string& kind, int repeats) {
  const int n = w.size();
  CollectiveProfile c;
  c.scale = kind == "all_reduce" ? 2 : 1;
  c.offset = kind == "p2p" ? 0 : -1;
  std::vector<double> xs, ys;
  for (int64_t bytes = 4096; bytes <= (int64_t(16) << 20); bytes *= 4) {
    const int64_t count = bytes / 4;
    std::vector<float> a(size_t(count * n)), b(size_t(count * n));
    double t = 0;
    double bus = 0;
    if (kind == "all_reduce") {
      t = typical_seconds_in_step(w, repeats, [&] { w.all_reduce(a.data(), count, DType::f32, comm::ReduceOp::sum); });
      bus = double(bytes) * 2 * (n - 1) / n;
    } else if (kind == "all_gather") {
      t = typical_seconds_in_step(w, repeats, [&] { w.all_gather(a.data(), b.data(), count / n, DType::f32); });
      bus = double(bytes) * (n - 1) / n;
    } else if (kind == "reduce_scatter") {
      t = typical_seconds_in_step(w, repeats, [&] { w.reduce_scatter(a.data(), b.data(), count / n, DType::f32, comm::ReduceOp::sum); });
      bus = double(bytes) * (n - 1) / n;
    } else if (kind == "all2all") {
      t = typical_seconds_in_step(w, repeats, [&] { w.all_to_all(a.data(), b.data(), count / n, DType::f32); });
      bus = double(bytes) * (n - 1) / n;
    } else {  // p2p: rank 0 to rank 1 and back (half the round trip)
      t = typical_seconds_in_step(w, repeats, [&] {
            if (w.rank() == 0) {
              w.send(a.data(), count, DType::f32, 1, 7);
              w.recv(b.data(), count, DType::f32, 1, 8);
            } else if (w.rank() == 1) {
              w.recv(b.data(), count, DType::f32, 0, 7);
              w.send(a.data(), count, DType::f32, 0, 8);
            }
          }) / 2;
      bus = double(bytes);
    }
    xs.push_back(bus);
    ys.push_back(std::max(t, 1e-9));  // weighted by 1 / t^2 below
  }
  // Least squares in relative error (each point weighted 1 / t^2): the sizes span 4 KiB to 16 MiB,
  // and an unweighted line follows the largest messages alone, so one slow large sample would set
  // the price of every small message (the tensor-parallel all-gathers and reduce-scatters of a layer).
  double weights = 0, mx = 0, my = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double wi = 1.0 / (ys[i] * ys[i]);
    weights += wi, mx += wi * xs[i], my += wi * ys[i];
  }
  mx /= weights;
  my /= weights;
  double sxy = 0, sxx = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double wi = 1.0 / (ys[i] * ys[i]);
    sxy += wi * (xs[i] - mx) * (ys[i] - my), sxx += wi * (xs[i] - mx) * (xs[i] - mx);
  }
  const double slope = std::max(sxy / sxx, 1e-15);
  c.bandwidth = 1.0 / slope;
  c.efficiency = 1;
  c.fixed_latency_s = std::max(0.0, my - slope * mx);
  c.latency_s = 0;
  return c;
}

}  // namespace

double typical_seconds_in_step(comm::Communicator& world, int repeats, const std::function<void()>& run,
                               const std::function<void()>& before) {
  TESSEL_CHECK(repeats >= 1, "calibrate: repeats must be at least 1, got {}", repeats);
  run();
  std::vector<double> runs;
  for (int i = 0; i < repeats; ++i) {
    if (before) before();
    if (world.size() > 1) world.barrier();
    const auto t0 = Clock::now();
    run();
    double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    if (world.size() > 1) {
      float slowest = float(seconds);
      world.all_reduce(&slowest, 1, DType::f32, comm::ReduceOp::max);
      seconds = double(slowest);
    }
    runs.push_back(seconds);
  }
  return upper_median(runs);
}

void keep_slowest_rank(comm::Communicator& world, HardwareProfile& p) {
  if (world.size() == 1) return;
  std::vector<double*> efficiencies;
  // What the figures are (family names, attention points' dims), hashed (FNV-1a) so that the ranks
  // can check that they line up.
  uint64_t what = 1469598103934665603ull;
  const auto mix = [&](uint64_t v) { what = (what ^ v) * 1099511628211ull; };
  for (auto& [op, m] : p.memory) {
    efficiencies.push_back(&m.efficiency);
    for (const char ch : op) mix(uint64_t(static_cast<unsigned char>(ch)));
  }
  for (const char* kind : {"attention_fwd", "attention_bwd"}) {
    ComputeOpProfile& c = p.compute.at(kind);
    efficiencies.push_back(&c.efficiency.fallback);
    for (ShapePoint& point : c.efficiency.points) {
      efficiencies.push_back(&point.efficiency);
      for (const double d : point.dims) mix(uint64_t(d));
    }
  }
  // Other lists on another rank would make the next reduction mismatch or mix figures: checked first.
  std::vector<int64_t> fewest{int64_t(efficiencies.size()), int64_t(what)}, most = fewest;
  world.all_reduce(fewest.data(), 2, DType::i64, comm::ReduceOp::min);
  world.all_reduce(most.data(), 2, DType::i64, comm::ReduceOp::max);
  TESSEL_CHECK(fewest == most, "calibrate: the ranks measured different kernel lists ({} and {} figures{})", fewest[0],
               most[0], fewest[0] == most[0] ? ", of other families or shapes" : "");
  // Negated, the host's time joins the minimum.
  std::vector<float> least{float(-p.host_seconds_per_kernel)};
  for (const double* e : efficiencies) least.push_back(float(*e));
  world.all_reduce(least.data(), int64_t(least.size()), DType::f32, comm::ReduceOp::min);
  p.host_seconds_per_kernel = -double(least[0]);
  for (size_t i = 0; i < efficiencies.size(); ++i) *efficiencies[i] = double(least[i + 1]);
}

HardwareProfile calibrate_machine(comm::Communicator& world, const CalibrateOptions& o) {
  TESSEL_CHECK(o.repeats >= 1, "calibrate: --repeats must be >= 1, got {}", o.repeats);
  TESSEL_CHECK(!strict_cpu(),
               "calibrate measures the default cpu mode, and TESSEL_DEVICE=cpu-strict adds its own cost to every "
               "kernel call (page protection, the queue's hand-over): calibrate with TESSEL_DEVICE unset");
  HardwareProfile p;
  const int threads = omp_get_max_threads();
  p.name = o.name.empty() ? fmt::format("{}, {} thread{} per rank, {} rank{}", cpu_model_name(), threads,
                                        threads == 1 ? "" : "s", world.size(), world.size() == 1 ? "" : "s")
                          : o.name;
  p.source = o.out;
  p.device = "cpu";
  p.threads = threads;
  p.devices_per_node = std::max(1, int(std::thread::hardware_concurrency()) / threads);
  p.async_progress = false;  // MPI progresses only inside MPI calls (communicator.h)
  const auto say = [&](const std::string& what) {
    if (world.rank() == 0) std::printf("calibrate: %s\n", what.c_str()), std::fflush(stdout);
  };
  say("GEMM grid {128, 512, 2048}^3 x NT, NN, TN+acc, bf16, f32 and fp8 (e4m3, per-tensor scales)");
  measure_gemms(world, p, o.repeats);
  say("memory bandwidth and kernel latency");
  measure_memory(world, p, o.repeats);
  say("the other kernels, in training steps of 5 calibration models (two of them FP8)");
  measure_step_kernels(p);  // each rank in a process of its own, not in step: then the slowest's figures
  keep_slowest_rank(world, p);
  if (world.size() >= 2) {
    say(fmt::format("collectives over {} ranks", world.size()));
    NetworkProfile net;
    for (const std::string& kind : kCollectiveKinds) net.ops[kind] = fit_collective(world, kind, o.repeats);
    p.networks["intra_node"] = std::move(net);
  }
  return p;
}

}  // namespace tessel::plan
