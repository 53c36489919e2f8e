#include "tessel/plan/estimate.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <map>
#include <optional>
#include <tuple>

#include "tessel/comm/communicator.h"
#include "tessel/comm/parallel_state.h"
#include "tessel/core/check.h"
#include "tessel/core/memory.h"
#include "tessel/kernels/gemm_primitive_census.h"
#include "tessel/nn/alike_calls.h"
#include "tessel/nn/stage_plan.h"
#include "tessel/pipeline/executor.h"
#include "tessel/pipeline/simulate.h"
#include "tessel/plan/cost_model.h"
#include "tessel/train/dry_run.h"

namespace tessel::plan {
namespace {

// Where a record's phase (core/memory.h, set by the trainer, the executor and the model) puts it.
enum class Part { forward, backward, weights, pipeline_transfer, after_passes, setup };

bool starts_with(const char* s, const char* prefix) { return std::string_view(s).rfind(prefix, 0) == 0; }

Part part_of(const MemoryPhase& p) {
  if (starts_with(p.what, "setup")) return Part::setup;
  if (starts_with(p.what, "backward (weights)")) return Part::weights;
  if (starts_with(p.what, "backward")) return Part::backward;
  if (starts_with(p.what, "forward")) return Part::forward;
  if (starts_with(p.what, "pipeline send") || starts_with(p.what, "pipeline receive")) return Part::pipeline_transfer;
  return Part::after_passes;
}

bool is_pass(Part p) { return p == Part::forward || p == Part::backward || p == Part::weights; }

using PassKey = std::tuple<int, int, int>;  // (Part, micro-batch, chunk)
PassKey key_of(Part part, const MemoryPhase& p) { return {int(part), std::max(p.micro_batch, 0), std::max(p.chunk, 0)}; }

// One stage's records, priced.
struct PricedStage {
  StageEstimate out;
  std::map<PassKey, double> pass_s;         // kernels + blocking collectives (+ exposed ring transfers)
  double dp_overlapped_s = 0;               // gradient buckets launched during backward
  double dp_last_bucket_s = 0;
  double gather_overlapped_s = 0;           // parameter all-gather launched to overlap the next forward
  double after_comm_s = 0;                  // blocking collectives after the passes
  double after_kernels_s = 0;               // kernels after the passes other than the optimizer's
  double transfer_s = 0;                    // the largest pipeline send
  std::map<PassKey, double> a2a_s;          // of pass_s: the MoE rows' all-to-alls (a fused F&B pair hides them)
};

// How many of the step's micro-batches a measured one stands for (see MicroBatches).
struct MicroBatches {
  int real = 1;      // per rank and step
  int measured = 1;  // run on the meta device: all of them, or a few standing for the rest
  // DualPipe: the first and the second half of the micro-batches take other chunks (other stages),
  // so each half stands for its own (measured and real both even).
  bool halves = false;
  bool pipelined = false;  // more than one pipeline stage: the micro-batches overlap in the schedule
  // The step's own index of measured micro-batch k: under `halves` the second half's first measured
  // one is the real second half's first. Without a pipeline the micro-batches run one after another
  // and the last measured one is the real last (a peak while its gradients are reduced, say); in a
  // pipeline the measured ones fill it as the first real ones do, and keep their indices (so a peak
  // in the last measured one's backward, at a gradient reduction, is named by its measured index).
  int real_index(int k) const {
    if (measured >= real) return k;
    if (!pipelined) return k == measured - 1 ? real - 1 : k;
    return halves && k >= measured / 2 ? k - measured / 2 + real / 2 : k;
  }
  // Measured micro-batch k stands for itself, except the second to last (of each half), which
  // stands for every micro-batch between the first measured - 2 and the last: all of them run the
  // same ops (the first and the last can differ: parameter waits, gradient buckets).
  double weight(int k) const {
    if (measured >= real) return 1.0;
    if (!halves) return k == measured - 2 ? double(real - measured + 1) : 1.0;
    const int h = measured / 2;
    return k == h - 2 || k == measured - 2 ? double(real / 2 - h + 1) : 1.0;
  }
};

// "..., micro-batch K, ..." with K the real step's index of measured micro-batch K.
std::string with_real_micro_batch(std::string at, const MicroBatches& mbs) {
  const std::string tag = "micro-batch ";
  const size_t p = at.find(tag);
  if (p == std::string::npos) return at;
  const size_t b = p + tag.size();
  size_t e = b;
  while (e < at.size() && std::isdigit(static_cast<unsigned char>(at[e]))) ++e;
  if (e == b) return at;
  return at.substr(0, b) + std::to_string(mbs.real_index(std::stoi(at.substr(b, e - b)))) + at.substr(e);
}

// A pass's time spent inside a transformer layer (this rank's layer index, from the phase).
void add_to_layer(StageEstimate& out, int layer, double t) {
  if (layer < 0) return;
  if (out.layer_s.size() <= size_t(layer)) out.layer_s.resize(size_t(layer) + 1, 0.0);
  out.layer_s[size_t(layer)] += t;
}

PricedStage price_stage(const HardwareProfile& hw, const comm::ParallelSizes& s, int dp,
                        const train::StepMeasurement& m, const MicroBatches& mbs) {
  PricedStage st;
  std::map<PassKey, double> attention_s, ring_s;
  std::map<PassKey, std::map<int, double>> ring_by_layer;  // the ring's transfers of each pass, by layer
  // Kernel seconds by (op family or gemm kind, gemm variant): views into the records (their names
  // are literals, their variants held by m), made strings once per key below.
  std::map<std::pair<std::string_view, std::string_view>, double> kernel_s;
  for (const kernels::OpRecord& r : m.op_records) {
    const Part part = part_of(r.phase);
    if (part == Part::setup) continue;
    const double w = double(r.count) * (is_pass(part) ? mbs.weight(r.phase.micro_batch) : 1.0);
    const double t = w * op_seconds(hw, r);
    st.out.flops += w * r.flops;
    const std::string_view kind = compute_kind(r);
    kernel_s[kind.starts_with("gemm") ? std::pair{kind, std::string_view(r.variant)} : std::pair{r.op, std::string_view()}] += t;
    if (is_pass(part)) {
      const PassKey k = key_of(part, r.phase);
      st.pass_s[k] += t;
      st.out.compute_s += t;
      add_to_layer(st.out, r.phase.layer, t);
      if (kind.starts_with("attention")) attention_s[k] += t;
    } else if (starts_with(r.phase.what, "optimizer step")) {
      st.out.optimizer_s += t;
    } else {
      st.after_kernels_s += t;
    }
  }
  // "gemm.bf16 NT" by its variant; other families by name.
  for (const auto& [key, t] : kernel_s)
    st.out.kernel_s_by_op[key.first.starts_with("gemm") ? fmt::format("{} {}", key.first, key.second)
                                                        : std::string(key.first)] += t;
  for (const comm::CommRecord& c : m.comm_records) {
    const Part part = part_of(c.phase);
    if (part == Part::setup || c.group_size <= 1) continue;  // a group of one moves nothing
    const std::string group = c.group.empty() ? "world" : c.group;
    // Gradient buckets launched during backward belong to the step, not to a micro-batch.
    const double w = is_pass(part) && !(c.overlapped && group != "cp") ? mbs.weight(c.phase.micro_batch) : 1.0;
    const double one = w * collective_seconds(hw, network_level(hw, group, s, dp), c), t = double(c.count) * one;
    st.out.comm_s_by_kind[group + " " + c.kind] += t;
    if (is_pass(part)) {
      const PassKey k = key_of(part, c.phase);
      if (!c.overlapped) {
        st.pass_s[k] += t;
        st.out.exposed_comm_s[group] += t;
        add_to_layer(st.out, c.phase.layer, t);
        if (c.pair_overlappable) st.a2a_s[k] += t;
      } else if (group == "cp") {
        ring_s[k] += t;
        ring_by_layer[k][c.phase.layer] += t;
      } else {  // the gradient reducer's buckets
        st.dp_overlapped_s += t;
        st.dp_last_bucket_s = one;
      }
    } else if (part == Part::pipeline_transfer) {
      if (c.kind == "send") st.transfer_s = std::max(st.transfer_s, one);
    } else if (c.overlapped) {
      st.gather_overlapped_s += t;
    } else {
      st.after_comm_s += t;
      st.out.exposed_comm_s[group] += t;
    }
  }
  // The ring's next K/V block moves while this one is computed: only what attention does not cover
  // is exposed (all of it where collectives do not progress during compute).
  for (const auto& [k, t] : ring_s) {
    const double exposed = hw.async_progress ? std::max(0.0, t - attention_s[k]) : t;
    st.pass_s[k] += exposed;
    st.out.exposed_comm_s["cp"] += exposed;
    // Each layer's share of what is exposed: as much as its transfers are of the pass's.
    if (t > 0)
      for (const auto& [layer, by_layer] : ring_by_layer[k]) add_to_layer(st.out, layer, exposed * by_layer / t);
  }
  double passes = 0, layers = 0;
  for (const auto& [k, t] : st.pass_s) passes += t;
  for (const double t : st.out.layer_s) layers += t;
  st.out.non_layer_s = std::max(0.0, passes - layers);
  return st;
}

double pass_sum(const std::map<PassKey, double>& pass_s, Part part, int chunk, int micro_batch = -1) {
  double t = 0;
  for (const auto& [k, v] : pass_s)
    if (std::get<0>(k) == int(part) && std::get<2>(k) == chunk && (micro_batch < 0 || std::get<1>(k) == micro_batch))
      t += v;
  return t;
}

// Micro-batches run on the meta device for a rank's `real` ones: enough for every pipeline rank
// to reach its steady state (the most micro-batches in flight, which is where memory peaks: P - rank
// in 1F1B; interleaving, whose count must be a multiple of P, warms up with up to 3P - 1 chunks of
// 2 x micro-batches) and for a middle micro-batch to stand for the rest.
int measured_micro_batches(int real, int P, int V) {
  const int steady = P == 1 ? 3 : V == 1 ? std::max(P, 3) : 2 * P;
  return std::min(real, steady);
}

// What makes two pipeline stages run the same ops: whether they hold the embedding and the head,
// and each chunk's layers as the model builds them (dense or MoE, FP8 or kept in bf16).
std::string stage_signature(const train::Config& cfg, int P, int stage) {
  if (P == 1) return "whole";
  const nn::StagePlan plan = cfg.stage_plan(stage);
  const nn::ModelConfig& m = cfg.model;
  std::string sig = fmt::format("{}{}", plan.has_embedding ? "E" : "", plan.has_head ? "H" : "");
  for (const nn::LayerRange& r : plan.chunks) {
    sig += '|';
    for (int64_t i = r.begin; i < r.end; ++i) {
      const bool bf16_end = i < m.fp8.bf16_layers_at_start || i >= m.num_layers - m.fp8.bf16_layers_at_end;
      sig += m.is_moe_layer(i) ? (bf16_end ? 'M' : 'm') : (bf16_end ? 'D' : 'd');
    }
  }
  return sig;
}

}  // namespace

Estimate estimate_step(const train::Config& cfg, const HardwareProfile& hw, int world, const EstimateOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  TESSEL_CHECK(world >= 1, "--world must be >= 1, got {}", world);
  const comm::ParallelSizes s = cfg.parallel_sizes();
  auto world0 = comm::make_meta_communicator(0, world);
  const comm::ParallelState layout(*world0, s);  // refuses sizes that do not divide the world
  const int dp = layout.dp_size();
  cfg.check_batch_splits(dp);
  const int P = s.pp, V = P > 1 ? cfg.parallel.chunks_per_rank() : 1;
  const int local_mbs = int(train::micro_batches_per_rank(cfg, dp, V));
  const int fewest = P > 1 ? pipeline::fewest_micro_batches(cfg.parallel.pipeline_schedule, P) : 1;
  const bool dual = P > 1 && pipeline::placement_of(cfg.parallel.pipeline_schedule) == pipeline::Placement::dual;
  MicroBatches mbs{local_mbs,
                   opt.every_micro_batch ? local_mbs
                                         : std::max(std::min(local_mbs, fewest), measured_micro_batches(local_mbs, P, V)),
                   dual, P > 1};
  // Under DualPipe a chunk runs half of the micro-batches (one direction's).
  const int per_chunk_mbs = dual ? local_mbs / 2 : local_mbs;
  train::Config measured = cfg;
  measured.train.global_batch_size = int64_t(mbs.measured) * cfg.train.micro_batch_size * dp;
  Estimate est;
  est.world = world;
  est.layout = layout.describe();
  est.hardware = hw.name;
  DefaultDeviceScope on_meta(Device::meta);
  const nn::AlikeCallsOnceScope alike_experts(!opt.every_expert);
  // Equal stages share one measurement where an earlier rank keeps at least as many micro-batches in
  // flight as a later one (1F1B, interleaved); a deferred W or a V breaks that order.
  const std::string& kind = cfg.parallel.pipeline_schedule;
  const bool share = opt.share_equal_stages && (kind == "1f1b" || kind == "interleaved");
  std::vector<PricedStage> stages;
  std::map<std::string, int> measured_stage;  // signature -> the first stage that has it
  for (int stage = 0; stage < P; ++stage) {
    const std::string sig = share ? stage_signature(cfg, P, stage) : std::to_string(stage);
    const auto same = measured_stage.find(sig);
    PricedStage st;
    if (same != measured_stage.end()) {
      st = stages[size_t(same->second)];
      st.out.ranks.clear();
      st.out.peak_at += fmt::format(" (stage {}'s: the same layers, at least as many micro-batches in flight)",
                                    same->second);
    } else {
      measured_stage[sig] = stage;
      const int rank = comm::ParallelState::rank_of({0, 0, 0, stage}, s, dp);
      auto w = comm::make_meta_communicator(rank, world);
      comm::ParallelState groups(*w, s);
      const bool cpu = hw.device == "cpu";
      // On cpu, oneDNN's GEMM primitives too: one per distinct problem, held from its first call on.
      std::optional<kernels::GemmPrimitiveCensus> census;
      if (cpu) census.emplace();
      // Elsewhere the bytes requested are priced, not the cpu pool's reserve: no pool to run.
      std::optional<MetaPoolOffScope> no_pool;
      if (!cpu) no_pool.emplace();
      const train::StepMeasurement m =
          train::measure_training_step(measured, groups, Device::meta, 1, nullptr, true, mbs.real);
      st = price_stage(hw, s, dp, m, mbs);
      if (census) {
        st.out.gemm_primitives = census->primitives();
        st.out.gemm_primitive_bytes = census->heap_bytes();
        census.reset();
      }
      st.out.peak_bytes = (cpu ? m.peak_bytes : m.peak_requested_bytes) + st.out.gemm_primitive_bytes;
      st.out.peak_bytes_by_category = cpu ? m.peak_bytes_by_category : m.peak_requested_bytes_by_category;
      st.out.peak_at = with_real_micro_batch(m.peak_at, mbs);
      if (cpu) {
        // The pool's reserve: a meta run of its own, two whole steps (every micro-batch, every
        // expert), as `tessel dry-run --steps 2`. The shortcuts make fewer allocations than the step
        // (calls accounted as alike ones, micro-batches standing for others), which leaves the pool
        // other free blocks; and a block freed and split in one step can leave the next step's
        // request no fit (llama-tiny ZeRO-1's reserve grows by 16 MiB in its second step, then holds).
        const nn::AlikeCallsOnceScope every_expert(false);
        st.out.peak_reserved_bytes =
            train::measure_training_step(cfg, groups, Device::meta, 2).peak_reserved_bytes + st.out.gemm_primitive_bytes;
      }
      for (int c = 0; c < V; ++c) {
        st.out.forward_s += pass_sum(st.pass_s, Part::forward, c) / local_mbs;
        st.out.backward_s += pass_sum(st.pass_s, Part::backward, c) / local_mbs;
        st.out.weight_s += pass_sum(st.pass_s, Part::weights, c) / local_mbs;
      }
    }
    st.out.role = fmt::format("pipeline stage {} of {}", stage, P);
    for (int r = 0; r < world; ++r)
      if (comm::ParallelState::coords_of(r, s, dp).pp == stage) st.out.ranks.push_back(r);
    stages.push_back(std::move(st));
  }
  // The passes: through the schedule simulator with each virtual stage's costs, or back to back.
  std::vector<double> end(size_t(P), 0.0), own(size_t(P), 0.0);
  for (int r = 0; r < P; ++r)
    for (const auto& [k, t] : stages[size_t(r)].pass_s) own[size_t(r)] += t;
  if (P > 1) {
    const pipeline::Schedule schedule = pipeline::make_training_schedule(
        cfg.parallel.pipeline_schedule, P, int(cfg.parallel.virtual_pipeline_model_parallel_size), local_mbs);
    pipeline::StageCosts costs;
    costs.f.assign(size_t(schedule.stages()), 0);
    costs.b = costs.w = costs.f;
    // DualPipe's F&B pairs run fused (parallel.overlap_moe_expert_parallel_comm): each pass's MoE
    // all-to-alls are in flight while the other pass computes, where the device's collectives progress
    // on their own (NCCL's stream; not MPI on cpu ranks, which shares the cores).
    const bool fused = cfg.fuses_moe_pairs() && hw.async_progress;
    if (fused) costs.f_hidable = costs.b_hidable = costs.f;  // zeros, one per virtual stage
    for (int r = 0; r < P; ++r) {
      const PricedStage& st = stages[size_t(r)];
      for (int c = 0; c < V; ++c) {
        const size_t v = size_t(schedule.virtual_stage(r, c));
        costs.f[v] = pass_sum(st.pass_s, Part::forward, c) / per_chunk_mbs;
        costs.b[v] = pass_sum(st.pass_s, Part::backward, c) / per_chunk_mbs;
        costs.w[v] = pass_sum(st.pass_s, Part::weights, c) / per_chunk_mbs;
        if (fused) {
          // (A part of the pass's sum, summed apart: kept within it whatever the rounding.)
          costs.f_hidable[v] = std::min(costs.f[v], pass_sum(st.a2a_s, Part::forward, c) / per_chunk_mbs);
          costs.b_hidable[v] = std::min(costs.b[v], pass_sum(st.a2a_s, Part::backward, c) / per_chunk_mbs);
        }
      }
      costs.comm = std::max(costs.comm, st.transfer_s);
    }
    const pipeline::Timeline t = pipeline::simulate(schedule, costs);
    for (int r = 0; r < P; ++r) {
      end[size_t(r)] = t.ranks[size_t(r)].empty() ? 0 : t.ranks[size_t(r)].back().end;
      // The all-to-alls the rank's fused pairs hid (the simulator's sum, at most all of them): no
      // longer exposed, and the rank's own passes that much shorter.
      double all = 0;
      for (const auto& [k, a2a] : stages[size_t(r)].a2a_s) all += a2a;
      const double hidden = std::min(t.hidden[size_t(r)], all);
      if (hidden > 0) {
        StageEstimate& o = stages[size_t(r)].out;
        own[size_t(r)] -= hidden;
        const auto ep = o.exposed_comm_s.find("ep");
        if (ep != o.exposed_comm_s.end()) ep->second = std::max(0.0, ep->second - hidden);
        o.hidden_all_to_all_s = hidden;
      }
    }
  } else {
    end = own;
  }
  for (int r = 0; r < P; ++r) {
    PricedStage& st = stages[size_t(r)];
    StageEstimate& o = st.out;
    o.pipeline_end_s = end[size_t(r)];
    o.bubble_s = std::max(0.0, end[size_t(r)] - own[size_t(r)]);
    // Gradient buckets launched during the last micro-batch's backward: hidden behind it as far as
    // it lasts where collectives progress during compute; the last bucket always shows.
    double dp_exposed = st.dp_overlapped_s;
    if (hw.async_progress) {
      double last_backward = 0;
      for (int c = 0; c < V; ++c)
        last_backward += pass_sum(st.pass_s, Part::backward, c, mbs.measured - 1) +
                         pass_sum(st.pass_s, Part::weights, c, mbs.measured - 1);
      dp_exposed = std::max(st.dp_last_bucket_s, st.dp_overlapped_s - last_backward);
    }
    if (dp_exposed > 0) o.exposed_comm_s["dp (gradient buckets)"] += dp_exposed;
    double gather_exposed = st.gather_overlapped_s;
    if (hw.async_progress) gather_exposed = std::max(0.0, st.gather_overlapped_s - pass_sum(st.pass_s, Part::forward, 0, 0));
    if (gather_exposed > 0) o.exposed_comm_s["dp (parameter all-gather)"] += gather_exposed;
    o.step_s = o.pipeline_end_s + dp_exposed + st.after_comm_s + o.optimizer_s + st.after_kernels_s + gather_exposed;
    est.step_s = std::max(est.step_s, o.step_s);
    est.peak_bytes = std::max(est.peak_bytes, o.peak_bytes);
    est.peak_reserved_bytes = std::max(est.peak_reserved_bytes, o.peak_reserved_bytes);
    est.stages.push_back(o);
  }
  const double tokens = double(cfg.train.global_batch_size) * double(cfg.model.seq_length);
  est.tokens_per_s = est.step_s > 0 ? tokens / est.step_s : 0;
  const auto peak = hw.compute.find(cfg.model.compute == DType::bf16 ? "gemm.bf16" : "gemm.f32");
  if (peak != hw.compute.end() && est.step_s > 0)
    est.mfu = cfg.model.train_flops_per_token() * est.tokens_per_s / (double(world) * peak->second.peak_flops);
  est.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return est;
}

}  // namespace tessel::plan
