#pragma once
// A dry run on the meta device: the layout of N ranks is built (ParallelState over a meta world, so
// every group check runs as on a real launch) and, for each distinct role, the real Trainer is set
// up with every tensor on meta: the memory of its model state is accounted by category exactly as
// the cpu allocator would account it, and nothing is allocated. A model of 671B parameters on 2,048
// ranks takes seconds on one machine.
//
// Not yet: the training step itself on meta (activations, workspaces, the peak inside the step,
// FLOPs per op family, bytes per collective). Only the GEMM kernels dispatch by device so far; the
// other op families still read host memory (docs/architecture.md, "Devices").
#include <cstdint>
#include <string>
#include <vector>

#include "tessel/core/memory.h"
#include "tessel/train/config.h"

namespace tessel::train {

// Ranks that hold the same model state: one pipeline stage (tensor-, context-, data- and
// expert-parallel ranks of a stage hold equal shares). Evaluated on the stage's first rank, which
// also holds the largest distributed-optimizer shard (shards are ceil(n / dp), the last one smaller).
struct DryRunRole {
  std::string role;        // "pipeline stage 3 of 16"
  std::vector<int> ranks;  // every rank of the role
  int evaluated_rank = 0;
  int64_t local_parameters = 0;            // elements of this rank's ParamStore
  // Bytes by category after setup (MemoryCategory order): as the cpu allocator accounts them (its
  // pool's blocks: 8 size classes per octave, up to 12.5% above the request), and as requested.
  MemoryStats::PerCategory model_state{};
  MemoryStats::PerCategory model_state_requested{};
  int64_t model_state_bytes = 0;
  int64_t model_state_requested_bytes = 0;
};

struct DryRunResult {
  int world = 1;
  std::string layout;  // ParallelState::describe() of rank 0
  std::vector<DryRunRole> roles;
  int64_t parameters_total = 0;             // the whole model, each tied or shared weight once
  int64_t parameters_active_per_token = 0;  // routed experts counted topk / num_experts
  double seconds = 0;
};

// Throws, naming the setting, for a layout that cannot exist (sizes that do not divide the world,
// a global batch that does not split over the data-parallel ranks, ...).
DryRunResult dry_run_model_state(const Config& cfg, int world);

}  // namespace tessel::train
