#include "run_context.h"

#include <cstdio>

#include "tessel/core/check.h"

namespace tessel::app {

RunContext make_run_context(const train::Config& cfg) {
  RunContext c;
  c.world = comm::mpi_launched() ? comm::make_mpi_world() : comm::make_local_communicator();
  c.groups = std::make_unique<comm::ParallelState>(
      *c.world, comm::ParallelSizes{int(cfg.parallel.tensor_model_parallel_size), int(cfg.parallel.context_parallel_size),
                                    int(cfg.parallel.pipeline_model_parallel_size),
                                    int(cfg.parallel.expert_model_parallel_size)});
  c.lead = c.world->rank() == 0;
  if (c.lead)
    for (const auto& w : cfg.warnings()) std::fprintf(stderr, "warning: %s\n", w.c_str());
  c.dp = c.groups->dp_size();
  c.dp_rank = c.groups->coords().dp;
  TESSEL_CHECK(cfg.train.global_batch_size % (cfg.train.micro_batch_size * c.dp) == 0,
               "train.global_batch_size {} must be a multiple of train.micro_batch_size {} x data-parallel size {}",
               cfg.train.global_batch_size, cfg.train.micro_batch_size, c.dp);
  return c;
}

}  // namespace tessel::app
