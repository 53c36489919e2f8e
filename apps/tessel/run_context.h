#pragma once
// The process layout of a training run: the world (MPI under mpirun / srun, else one local rank),
// its parallel groups, and this rank's share of each global batch. Shared by train and bench.
#include <memory>

#include "tessel/comm/parallel_state.h"
#include "tessel/train/config.h"

namespace tessel::app {

struct RunContext {
  std::unique_ptr<comm::Communicator> world;
  std::unique_ptr<comm::ParallelState> groups;
  bool lead = true;  // rank 0: logs, metrics, checkpoints
  int64_t dp = 1, dp_rank = 0;
  // Global micro-batch indices of this rank's share of step `iter` (accum = global / micro batch):
  // the union over data-parallel ranks is what one process would take.
  int64_t micro_batch_index(int64_t iter, int64_t accum, int64_t local) const {
    return iter * accum + local * dp + dp_rank;
  }
};

// MPI's world under mpirun / srun, else one local rank.
std::unique_ptr<comm::Communicator> make_world();

// Throws (on every rank alike) when the global batch does not split over the data-parallel ranks.
// Rank 0 prints the config's warnings (Config::warnings) to stderr. Without a world, make_world's.
RunContext make_run_context(const train::Config& cfg, std::unique_ptr<comm::Communicator> world = nullptr);

}  // namespace tessel::app
