#pragma once
// parallel.auto (`tessel train --auto-parallel`): the run takes the layout that `tessel plan search`
// ranks fastest for the world it was launched with (src/tessel/plan/search.h), on the hardware
// profile parallel.auto_hardware, or, where that is empty, on this machine measured at start-up by
// every rank as `tessel plan calibrate` measures it. Rank 0 searches and prints the plan; every rank
// applies the same overrides after the config file's and --set's, so the layout keys of the file
// are replaced. A model that fits no layout stops the run with the search's reasons.
#include <string>
#include <vector>

#include "tessel/comm/communicator.h"
#include "tessel/train/config.h"

namespace tessel::app {

// `cfg` as loaded from `path` with `sets`; returned as it is unless cfg.parallel.auto_layout.
train::Config choose_auto_layout(const std::string& path, const std::vector<std::string>& sets,
                                 const train::Config& cfg, comm::Communicator& world);

}  // namespace tessel::app
