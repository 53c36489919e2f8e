#include "tessel/train/dry_run.h"

#include <chrono>

#include "tessel/core/check.h"
#include "tessel/data/batch.h"
#include "tessel/nn/params.h"
#include "tessel/pipeline/schedule.h"
#include "tessel/train/trainer.h"

namespace tessel::train {
namespace {

// Parameters of the whole model, from its unsharded ParamStore on one meta rank.
void count_parameters(const Config& cfg, DryRunResult& out) {
  Config whole = cfg;
  whole.parallel.tensor_model_parallel_size = whole.parallel.context_parallel_size = 1;
  whole.parallel.pipeline_model_parallel_size = whole.parallel.expert_model_parallel_size = 1;
  whole.parallel.virtual_pipeline_model_parallel_size = 1;
  whole.parallel.use_distributed_optimizer = false;
  whole.train.global_batch_size = whole.train.micro_batch_size;
  Trainer t(whole, nullptr);
  const nn::ModelConfig& m = cfg.model;
  int64_t total = 0, routed = 0;
  for (const nn::ParamSpec& s : t.model().params().specs()) {
    if (s.tied_copy) continue;
    total += s.numel;
    if (nn::is_routed_expert_name(s.name)) routed += s.numel;
  }
  out.parameters_total = total;
  const int64_t inactive = m.num_experts > 0 ? routed / m.num_experts * (m.num_experts - m.moe_router_topk) : 0;
  out.parameters_active_per_token = total - inactive;
}

// Switches a process-wide log (kernels::op_log(), comm::comm_log()) on, cleared, for a scope, and
// back as it was.
template <class Log>
class LogSession {
 public:
  explicit LogSession(Log& log) : log_(log), was_(log.enabled()) {
    log_.clear();
    log_.set_enabled(true);
  }
  ~LogSession() {
    log_.set_enabled(was_);
    log_.clear();
  }
  LogSession(const LogSession&) = delete;
  LogSession& operator=(const LogSession&) = delete;

 private:
  Log& log_;
  bool was_;
};

}  // namespace

int64_t micro_batches_per_rank(const Config& cfg, int dp, int chunks) {
  const int64_t local = cfg.grad_accumulation_steps() / dp, pp = cfg.parallel.pipeline_model_parallel_size;
  // The schedule's passes, pp x chunks x micro-batches, without overflowing on the way.
  TESSEL_CHECK(local <= pipeline::kMaxSchedulePasses / (pp * chunks),
               "train.global_batch_size {}: {} micro-batches per rank{}{} is more than a dry run or the planner takes "
               "(a schedule of at most {} passes, as tessel schedule)",
               cfg.train.global_batch_size, local, pp > 1 ? fmt::format(" x {} pipeline stages", pp) : std::string(),
               chunks > 1 ? fmt::format(" x {} chunks", chunks) : std::string(), pipeline::kMaxSchedulePasses);
  return local;
}

int64_t StepMeasurement::pool_free_bytes() const {
  int64_t in_use = 0;
  for (const int64_t b : peak_reserved_bytes_by_category) in_use += b;
  return peak_reserved_bytes - in_use;
}

StepMeasurement measure_training_step(const Config& cfg, comm::ParallelState& groups, Device device, int steps,
                                      nn::MoeRoutingTrace* routing, bool keep_records, int64_t held_micro_batches) {
  TESSEL_CHECK(steps >= 1, "measure_training_step: steps must be >= 1, got {}", steps);
  DefaultDeviceScope on(device);
  nn::MoeRoutingTraceScope routed(routing);
  Allocator& a = allocator(device);
  for (auto& [name, g] : groups.named_groups())
    if (g) g->reset_stats();
  const LogSession ops(kernels::op_log());
  const LogSession collectives(comm::comm_log());
  a.start_fresh_pool();
  a.reset_peak();
  const MemoryStats before = a.stats();
  StepMeasurement m;
  {
    Trainer t(cfg, &groups);
    const int64_t local = micro_batches_per_rank(cfg, groups.dp_size());
    TESSEL_CHECK(held_micro_batches <= pipeline::kMaxSchedulePasses, "a dry run cannot hold {} micro-batches (at most {})",
                 held_micro_batches, pipeline::kMaxSchedulePasses);
    std::vector<data::Batch> mbs, held;  // run; only held
    for (int64_t k = 0; k < std::max(local, held_micro_batches); ++k) {
      const Shape shape{cfg.train.micro_batch_size, cfg.model.seq_length};
      (k < local ? mbs : held).push_back({Tensor::zeros(shape, DType::i64), Tensor::zeros(shape, DType::i64)});
    }
    for (int s = 0; s < steps; ++s) {
      const auto t0 = std::chrono::steady_clock::now();
      t.step(mbs, s);
      m.step_seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      m.records_at_step_end.push_back(kernels::op_log().size());
    }
  }
  const MemoryStats after = a.stats();
  m.peak_bytes = after.peak_total - before.current_total;
  for (int c = 0; c < kMemoryCategories; ++c) {
    m.peak_bytes_by_category[size_t(c)] = after.at_peak[size_t(c)] - before.current[size_t(c)];
    m.peak_requested_bytes_by_category[size_t(c)] = after.requested_at_peak[size_t(c)] - before.requested[size_t(c)];
    m.peak_requested_bytes += m.peak_requested_bytes_by_category[size_t(c)];
  }
  m.peak_at = describe(after.peak_phase);
  m.peak_reserved_bytes = after.peak_reserved - before.reserved;
  for (int c = 0; c < kMemoryCategories; ++c)
    m.peak_reserved_bytes_by_category[size_t(c)] = after.at_peak_reserved[size_t(c)] - before.current[size_t(c)];
  m.peak_reserved_at = describe(after.peak_reserved_phase);
  m.ops = kernels::op_log().totals_by_op();
  for (const auto& [op, t] : m.ops) m.flops += t.flops;
  for (auto& [name, g] : groups.named_groups())
    if (g && !g->stats().empty()) m.comm_by_group[name] = g->stats();
  if (keep_records) {  // moved out (the session clears the logs when it ends)
    m.op_records = kernels::op_log().take_records();
    m.comm_records = comm::comm_log().take_records();
  }
  return m;
}

DryRunResult dry_run(const Config& cfg, int world, int steps, double expert_skew) {
  const auto t0 = std::chrono::steady_clock::now();
  TESSEL_CHECK(world >= 1, "--world must be >= 1, got {}", world);
  TESSEL_CHECK(steps >= 0, "dry run: steps must be >= 0, got {}", steps);
  const nn::MetaRoutingSkewScope skewed(expert_skew);  // refuses a skew below 1
  const int64_t E = cfg.model.num_experts, k = cfg.model.moe_router_topk;
  if (expert_skew > 1.0)
    TESSEL_CHECK(E > 0 && E > k && expert_skew <= double(E) / double(k),
                 "--expert-skew {}: {}", expert_skew,
                 E == 0 ? std::string("the model has no experts (model.num_experts 0)")
                        : fmt::format("at most {} = model.num_experts {} / model.moe_router_topk {} (expert 0 takes "
                                      "at most one copy of each token)",
                                      double(E) / double(k), E, k));
  DefaultDeviceScope on_meta(Device::meta);
  Allocator& meta = allocator(Device::meta);
  const comm::ParallelSizes s = cfg.parallel_sizes();
  DryRunResult out;
  out.world = world;
  out.expert_skew = expert_skew;
  auto world0 = comm::make_meta_communicator(0, world);
  const comm::ParallelState layout(*world0, s);  // refuses sizes that do not divide the world
  out.layout = layout.describe();
  const int dp = layout.dp_size();
  cfg.check_batch_splits(dp);
  const bool run_step = steps > 0;
  // Skewed routing under expert parallelism: the rank holding expert 0 differs from the others.
  const bool split_ep = expert_skew > 1.0 && s.ep > 1;
  for (int stage = 0; stage < s.pp; ++stage) {
    std::vector<int> hot, cold;  // the stage's ranks by expert-parallel rank: 0, others
    for (int r = 0; r < world; ++r) {
      const comm::RankCoords c = comm::ParallelState::coords_of(r, s, dp);
      if (c.pp != stage) continue;
      const bool is_hot = !split_ep || comm::ParallelState::ep_rank_of(c, s) == 0;
      (is_hot ? hot : cold).push_back(r);
    }
    const std::string name = fmt::format("pipeline stage {} of {}", stage, s.pp);
    std::vector<std::pair<std::string, std::vector<int>>> roles;
    if (split_ep) {
      roles.emplace_back(name + ", expert-parallel rank 0 (hot expert)", hot);
      roles.emplace_back(fmt::format("{}, expert-parallel ranks 1-{}", name, s.ep - 1), cold);
    } else {
      roles.emplace_back(name, hot);
    }
    for (auto& [role_name, ranks] : roles) {
      DryRunRole role;
      role.role = role_name;
      role.ranks = ranks;
      role.evaluated_rank = ranks.front();  // the stage's first rank: rank_of({0, 0, 0, stage}) unsplit
      auto w = comm::make_meta_communicator(role.evaluated_rank, world);
      comm::ParallelState groups(*w, s);
      const MemoryStats before = meta.stats();
      {
        Trainer t(cfg, &groups);
        const MemoryStats after = meta.stats();
        for (int c = 0; c < kMemoryCategories; ++c) {
          role.model_state[size_t(c)] = after.current[size_t(c)] - before.current[size_t(c)];
          role.model_state_requested[size_t(c)] = after.requested[size_t(c)] - before.requested[size_t(c)];
          role.model_state_bytes += role.model_state[size_t(c)];
          role.model_state_requested_bytes += role.model_state_requested[size_t(c)];
        }
        role.local_parameters = t.model().params().numel();
      }
      if (run_step) {
        role.step = measure_training_step(cfg, groups, Device::meta, steps);
        role.step_ran = true;
      }
      out.roles.push_back(std::move(role));
    }
  }
  count_parameters(cfg, out);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace tessel::train
