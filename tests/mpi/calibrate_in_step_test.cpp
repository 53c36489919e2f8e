// Calibration under mpirun measures the ranks in step: each timed run starts on every rank at once
// and takes the slowest rank's time, and the figures of the calibration steps are the slowest
// rank's. Checked with runs whose length is set per rank (np 2, 4, 8).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "mpi/mpi_world.h"
#include "tessel/core/check.h"
#include "tessel/plan/calibrate.h"

using namespace tessel;

namespace {

using tessel::testing::world;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

TEST(CalibrateInStep, EachRunStartsTogetherAndTakesTheSlowestRanksTime) {
  comm::Communicator& w = world();
  const bool slow = w.rank() == w.size() - 1;
  // The last rank runs 40 ms, the others 2 ms; rank 0's preparation (not timed) takes 150 ms, so
  // without the barrier the other ranks would start their runs long before it ends. steady_clock is
  // the machine's monotonic clock, the same in every process of this machine: times are taken from
  // rank 0's reading.
  int64_t epoch_ns = Clock::now().time_since_epoch().count();
  w.broadcast(&epoch_ns, 1, DType::i64, 0);
  const Clock::time_point epoch{Clock::duration(epoch_ns)};
  std::vector<float> starts;    // seconds since `epoch`, this rank's runs (the warm-up's first)
  std::vector<float> prepared;  // rank 0: when each preparation ended
  const double typical = plan::typical_seconds_in_step(
      w, 3,
      [&] {
        starts.push_back(float(seconds_since(epoch)));
        std::this_thread::sleep_for(std::chrono::milliseconds(slow ? 40 : 2));
      },
      [&] {
        if (w.rank() != 0) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(150));
        prepared.push_back(float(seconds_since(epoch)));
      });
  EXPECT_GE(typical, 0.040) << "rank " << w.rank();
  EXPECT_LT(typical, 0.150) << "rank " << w.rank();
  // The same figure on every rank.
  float least = float(typical), most = float(typical);
  w.all_reduce(&least, 1, DType::f32, comm::ReduceOp::min);
  w.all_reduce(&most, 1, DType::f32, comm::ReduceOp::max);
  EXPECT_EQ(least, most);
  // No rank started a timed run before rank 0 had prepared it (an order, not a tolerance: it holds
  // however late the scheduler wakes a rank).
  ASSERT_EQ(starts.size(), 4u);
  prepared.resize(3);
  w.broadcast(prepared.data(), 3, DType::f32, 0);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_GE(starts[i + 1], prepared[i] - 1e-4f) << "rank " << w.rank() << ", timed run " << i;
}

// The median run counts, not the fastest: a plan predicts a typical step. Timed runs of 30, 500,
// 2, 30 and 30 ms (after a warm-up; out of order, so that the median needs the sort) are 30 ms
// typically, 2 ms at best and 118 ms on average; alone and with every rank.
TEST(CalibrateInStep, TheTypicalRunCountsNotTheFastest) {
  const auto runs_of = [](comm::Communicator& c) {
    const int ms[] = {1, 30, 500, 2, 30, 30};  // the warm-up first
    int call = 0;
    return plan::typical_seconds_in_step(c, 5, [&] { std::this_thread::sleep_for(std::chrono::milliseconds(ms[call++])); });
  };
  auto alone = comm::make_local_communicator();
  for (comm::Communicator* c : {alone.get(), &world()}) {
    const double typical = runs_of(*c);
    EXPECT_GE(typical, 0.030) << "world of " << c->size();
    EXPECT_LT(typical, 0.100) << "world of " << c->size();
  }
}

plan::HardwareProfile profile_of_rank(int rank) {
  plan::HardwareProfile p;
  p.host_seconds_per_kernel = 1e-6 * (5 + rank);
  p.memory["add"].efficiency = 0.5 + 0.1 * rank;
  p.memory["rmsnorm_fwd"].efficiency = 0.9 - 0.1 * rank;
  for (const char* kind : {"attention_fwd", "attention_bwd"}) {
    plan::ComputeOpProfile& c = p.compute[kind];
    c.peak_flops = 1e11;
    c.efficiency.fallback = 0.3 - 0.01 * rank;
    c.efficiency.points = {{{2, 128, 4, 4, 64, 64}, "", 0.2 + 0.01 * rank}, {{1, 320, 6, 2, 32, 32}, "", 0.4 - 0.02 * rank}};
  }
  return p;
}

TEST(CalibrateInStep, TheStepKernelsFiguresAreTheSlowestRanks) {
  comm::Communicator& w = world();
  const int last = w.size() - 1;
  plan::HardwareProfile p = profile_of_rank(w.rank());
  plan::keep_slowest_rank(w, p);
  // Each figure the slowest rank's: the least efficiency, the most host time.
  EXPECT_NEAR(p.host_seconds_per_kernel, 1e-6 * (5 + last), 1e-12);
  EXPECT_NEAR(p.memory.at("add").efficiency, 0.5, 1e-6);
  EXPECT_NEAR(p.memory.at("rmsnorm_fwd").efficiency, 0.9 - 0.1 * last, 1e-6);
  for (const char* kind : {"attention_fwd", "attention_bwd"}) {
    const plan::ComputeOpProfile& c = p.compute.at(kind);
    EXPECT_NEAR(c.efficiency.fallback, 0.3 - 0.01 * last, 1e-6) << kind;
    EXPECT_NEAR(c.efficiency.points[0].efficiency, 0.2, 1e-6) << kind;
    EXPECT_NEAR(c.efficiency.points[1].efficiency, 0.4 - 0.02 * last, 1e-6) << kind;
    EXPECT_DOUBLE_EQ(c.peak_flops, 1e11) << kind;  // the GEMM peak is measured in step, not reduced here
  }
}

TEST(CalibrateInStep, RanksWithDifferentKernelListsAreRefused) {
  comm::Communicator& w = world();
  plan::HardwareProfile p = profile_of_rank(w.rank());
  if (w.rank() == 0) p.memory["swiglu_fwd"].efficiency = 0.7;  // a family the others did not measure
  try {
    plan::keep_slowest_rank(w, p);
    FAIL() << "expected an error on rank " << w.rank();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the ranks measured different kernel lists (8 and 9 figures)"),
              std::string::npos)
        << e.what();
  }
  // As many figures, but of another family on rank 0: refused as well, not mixed.
  p = profile_of_rank(w.rank());
  if (w.rank() == 0) {
    p.memory.erase("add");
    p.memory["swiglu_fwd"].efficiency = 0.7;
  }
  try {
    plan::keep_slowest_rank(w, p);
    FAIL() << "expected an error on rank " << w.rank();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(8 and 8 figures, of other families or shapes)"), std::string::npos)
        << e.what();
  }
}

}  // namespace
