// GoogleTest main for tests run under mpirun: every rank runs every test; rank 0 prints; the exit
// code is non-zero on every rank if any rank failed.
#include <gtest/gtest.h>
#include <mpi.h>

#include "tessel/comm/communicator.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto world = tessel::comm::make_mpi_world();
  if (world->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  world->all_reduce(&failed, 1, tessel::DType::i32, tessel::comm::ReduceOp::max);
  if (world->rank() == 0 && failed) std::fprintf(stderr, "a test failed on some rank (see its output)\n");
  return failed;
}
