#pragma once
// The world communicator shared by the MPI test files (MPI is initialised once per process).
#include "tessel/comm/communicator.h"

namespace tessel::testing {

inline comm::Communicator& world() {
  static auto w = comm::make_mpi_world();
  return *w;
}

}  // namespace tessel::testing
