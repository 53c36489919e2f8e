#include "tessel/train/dry_run.h"

#include <chrono>

#include "tessel/comm/parallel_state.h"
#include "tessel/core/check.h"
#include "tessel/nn/params.h"
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

}  // namespace

DryRunResult dry_run_model_state(const Config& cfg, int world) {
  const auto t0 = std::chrono::steady_clock::now();
  TESSEL_CHECK(world >= 1, "--world must be >= 1, got {}", world);
  DefaultDeviceScope on_meta(Device::meta);
  Allocator& meta = allocator(Device::meta);
  const comm::ParallelSizes s = cfg.parallel_sizes();
  DryRunResult out;
  out.world = world;
  auto world0 = comm::make_meta_communicator(0, world);
  const comm::ParallelState layout(*world0, s);  // refuses sizes that do not divide the world
  out.layout = layout.describe();
  const int dp = layout.dp_size();
  cfg.check_batch_splits(dp);
  for (int stage = 0; stage < s.pp; ++stage) {
    DryRunRole role;
    role.role = fmt::format("pipeline stage {} of {}", stage, s.pp);
    for (int r = 0; r < world; ++r)
      if (comm::ParallelState::coords_of(r, s, dp).pp == stage) role.ranks.push_back(r);
    role.evaluated_rank = comm::ParallelState::rank_of({0, 0, 0, stage}, s, dp);
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
    out.roles.push_back(std::move(role));
  }
  count_parameters(cfg, out);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace tessel::train
