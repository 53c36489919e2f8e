#include "run_context.h"

#include <cstdio>

#include "tessel/core/check.h"

namespace tessel::app {

std::unique_ptr<comm::Communicator> make_world() {
  return comm::mpi_launched() ? comm::make_mpi_world() : comm::make_local_communicator();
}

RunContext make_run_context(const train::Config& cfg, std::unique_ptr<comm::Communicator> world) {
  RunContext c;
  c.world = world ? std::move(world) : make_world();
  if (c.world->label().empty()) c.world->set_label("world");  // named in the watchdog's messages
  c.groups = std::make_unique<comm::ParallelState>(*c.world, cfg.parallel_sizes());
  c.lead = c.world->rank() == 0;
  if (c.lead)
    for (const auto& w : cfg.warnings()) std::fprintf(stderr, "warning: %s\n", w.c_str());
  c.dp = c.groups->dp_size();
  c.dp_rank = c.groups->coords().dp;
  cfg.check_batch_splits(c.dp);
  return c;
}

}  // namespace tessel::app
