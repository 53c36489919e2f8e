#pragma once
// A dry run on the meta device: the layout of N ranks is built (ParallelState over a meta world, so
// every group check runs as on a real launch) and, for each distinct role, the real Trainer is set
// up and the real training step run with every tensor on meta: forward, backward, the pipeline
// schedule, gradient reduction, the optimizer step. Memory is accounted by category exactly as the
// cpu allocator accounts it, and nothing is allocated; every kernel call and collective is recorded.
// A model of 671B parameters on 2,048 ranks takes seconds on one machine.
//
// MoE routing on meta is balanced (every expert gets its even share of token copies), or skewed
// (expert_skew: expert 0 takes that many times its share, nn::MetaRoutingSkewScope), unless a real
// run's routing is replayed (measure_training_step).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tessel/comm/communicator.h"
#include "tessel/comm/parallel_state.h"
#include "tessel/core/memory.h"
#include "tessel/kernels/op_log.h"
#include "tessel/nn/moe.h"
#include "tessel/train/config.h"

namespace tessel::train {

// One rank's training steps as measured (on any device): memory relative to before the Trainer was
// set up (the device's pool started afresh then), the kernels called and the collectives each group ran.
struct StepMeasurement {
  int64_t peak_bytes = 0;                             // the highest total over setup and the steps
  MemoryStats::PerCategory peak_bytes_by_category{};  // each category's bytes at that moment (cpu pool blocks)
  int64_t peak_requested_bytes = 0;                   // the same moment's bytes as requested, before rounding
  MemoryStats::PerCategory peak_requested_bytes_by_category{};
  std::string peak_at;                                // the phase of the step it occurred in
  // What the device's pool held at most (in use plus the free blocks it kept: the pool's slack),
  // started afresh for the measurement, and the bytes in use of each category at that moment; the
  // rest, peak_reserved_bytes minus their sum, is free blocks. The same on cpu and meta, whose pool
  // runs over made-up addresses, when no collective or kernel queue frees blocks out of program
  // order (not in strict cpu mode: its blocks go back as the queue reaches them), and not measured
  // under a MetaPoolOffScope (core/memory.h), where meta keeps no pool.
  int64_t peak_reserved_bytes = 0;
  MemoryStats::PerCategory peak_reserved_bytes_by_category{};
  std::string peak_reserved_at;  // the phase of the step the reserve's peak occurred in
  int64_t pool_free_bytes() const;  // at the reserve's peak: peak_reserved_bytes less the bytes in use
  std::map<std::string, kernels::OpTotals> ops;       // per op family (kernels::OpRecord::op)
  double flops = 0;
  std::map<std::string, std::map<std::string, comm::CommStats>> comm_by_group;  // group -> kind -> totals
  // Every kernel call and collective of setup and the steps, in order, each with its phase (only
  // with keep_records: the planner prices them one by one).
  std::vector<kernels::OpRecord> op_records;
  std::vector<comm::CommRecord> comm_records;
  // Per step: its wall time, and how many op records the log held when it ended: step s >= 1's
  // kernel calls are op_records [records_at_step_end[s - 1], records_at_step_end[s]).
  std::vector<double> step_seconds;
  std::vector<size_t> records_at_step_end;
};

// The micro-batches per rank of a step on `dp` data-parallel ranks (chunks: a pipeline's chunks per
// rank), refused, naming train.global_batch_size, where the schedule of pp x chunks x micro-batches
// passes is larger than `tessel schedule` takes (pipeline::kMaxSchedulePasses): the dry run sets up
// every micro-batch's data before the first step.
int64_t micro_batches_per_rank(const Config& cfg, int dp, int chunks = 1);

// Sets the Trainer up for this rank of `groups` with its tensors on `device` and runs `steps`
// training steps on micro-batches of the configured shapes (token 0 everywhere: values do not change
// what a dense step allocates or calls; MoE routing does, see below). The op log is switched on for
// the duration. routing (optional): the MoE blocks record their routing to it (cpu) or replay it
// (meta), so a meta run can be given a real run's token counts; without one meta routes in balance.
// held_micro_batches (optional, more than the config's per rank): the step's data holds that many
// micro-batches while only the config's run, as a planner measures a long step by a few of its
// micro-batches (plan/estimate.h) with the memory of all of its data.
StepMeasurement measure_training_step(const Config& cfg, comm::ParallelState& groups, Device device, int steps,
                                      nn::MoeRoutingTrace* routing = nullptr, bool keep_records = false,
                                      int64_t held_micro_batches = 0);

// Ranks that hold the same model state: one pipeline stage (tensor-, context-, data- and
// expert-parallel ranks of a stage hold equal shares). Evaluated on the stage's first rank, which
// also holds the largest distributed-optimizer shard (shards are ceil(n / dp), the last one smaller).
// With skewed routing under expert parallelism a stage is two roles: the expert-parallel rank 0,
// which holds the hot expert 0, and the others (evaluated on the first of them, whose experts get
// the rounding's extra copies: the most loaded of them).
struct DryRunRole {
  std::string role;        // "pipeline stage 3 of 16" (", expert-parallel rank 0 (hot expert)")
  std::vector<int> ranks;  // every rank of the role
  int evaluated_rank = 0;
  int64_t local_parameters = 0;            // elements of this rank's ParamStore
  // Bytes by category after setup (MemoryCategory order): as the cpu allocator accounts them (its
  // pool's blocks: 8 size classes per octave, up to 12.5% above the request), and as requested.
  MemoryStats::PerCategory model_state{};
  MemoryStats::PerCategory model_state_requested{};
  int64_t model_state_bytes = 0;
  int64_t model_state_requested_bytes = 0;
  bool step_ran = false;  // the training step below was run (dry_run with steps > 0)
  StepMeasurement step;
};

struct DryRunResult {
  int world = 1;
  double expert_skew = 1.0;
  std::string layout;  // ParallelState::describe() of rank 0
  std::vector<DryRunRole> roles;
  int64_t parameters_total = 0;             // the whole model, each tied or shared weight once
  int64_t parameters_active_per_token = 0;  // routed experts counted topk / num_experts
  double seconds = 0;
};

// Throws, naming the setting, for a layout that cannot exist (sizes that do not divide the world,
// a global batch that does not split over the data-parallel ranks, ...). steps > 0 also runs that
// many training steps per role.
// expert_skew: the meta routing's skew (1: balanced; see nn::MetaRoutingSkewScope).
DryRunResult dry_run(const Config& cfg, int world, int steps, double expert_skew = 1.0);
inline DryRunResult dry_run_model_state(const Config& cfg, int world) { return dry_run(cfg, world, 0); }

}  // namespace tessel::train
