// Pipeline schedules: structure, deadlock freedom, and the simulator against closed-form makespans
// (REFERENCE.md: 1F1B bubble (P-1)(F+B); interleaved 1F1B divides it by V).
#include <gtest/gtest.h>

#include <cmath>

#include "tessel/core/check.h"
#include "tessel/pipeline/simulate.h"

using namespace tessel;
using namespace tessel::pipeline;

namespace {

TEST(Schedule, OneFOneBMakespanIsTheClosedForm) {
  for (int p : {1, 2, 3, 4, 8})
    for (int m : {1, 3, 8, 24}) {
      Schedule s = make_1f1b(p, m);
      validate(s);
      add_p2p(s);
      // Classic 1F1B (backward not split, W = 0): makespan (M + P - 1)(F + B).
      const Costs classic{1.0, 3.0, 0.0, 0.0};
      EXPECT_NEAR(simulate(s, classic).makespan, (m + p - 1) * (classic.f + classic.b), 1e-9);
      // B/W split with W right after B: the input gradient leaves before W runs, so W drops off the
      // fill/drain path: makespan M (F + B + W) + (P - 1)(F + B).
      const Costs c{1.0, 2.0, 1.0, 0.0};
      const Timeline t = simulate(s, c);
      const double want = m * (c.f + c.b + c.w) + (p - 1) * (c.f + c.b);
      EXPECT_NEAR(t.makespan, want, 1e-9) << "p " << p << " m " << m;
      EXPECT_NEAR(t.bubble_fraction, (p - 1) * (c.f + c.b) / want, 1e-9);
      // 1F1B keeps at most P - r micro-batches in flight on rank r (its memory advantage over GPipe).
      for (int r = 0; r < p; ++r) EXPECT_LE(t.peak_activations[size_t(r)], std::min(p - r, m));
    }
}

TEST(Schedule, InterleavingDividesTheBubbleByV) {
  const int p = 4, m = 8;
  const Costs c{1.0, 1.0, 1.0, 0.0};
  Schedule plain = make_1f1b(p, m);
  add_p2p(plain);
  const double base = simulate(plain, c).makespan;
  for (int v : {2, 4}) {
    Schedule s = make_interleaved_1f1b(p, v, m);
    validate(s);
    add_p2p(s);
    const Timeline t = simulate(s, c);
    const double work = m * (c.f + c.b + c.w);
    // Megatron's analysis: the fill/drain bubble shrinks by V (here (P-1)(F+B)/V, W off the path).
    EXPECT_NEAR(t.makespan, work + (p - 1) * (c.f + c.b) / v, 1e-9) << "v " << v;
    EXPECT_LT(t.makespan, base);
  }
}

TEST(Schedule, EveryOperationOnceAndInOrder) {
  Schedule s = make_interleaved_1f1b(2, 3, 4);
  validate(s);
  Schedule broken = s;
  std::swap(broken.ranks[0][0], broken.ranks[0].back());  // a W before its B
  EXPECT_THROW(validate(broken), Error);
  EXPECT_THROW(make_interleaved_1f1b(4, 2, 6), Error);  // micro-batches not a multiple of pp
}

TEST(Schedule, DeadlocksAreReportedByTheSimulator) {
  Schedule s = make_1f1b(2, 2);
  // Rank 1 (the last stage) insists on a backward before any forward arrives... of a micro-batch
  // rank 0 only sends after its own backward: a cycle.
  s.ranks[0] = {{OpKind::B, 0, 0}, {OpKind::F, 0, 0}};
  try {
    simulate(s, Costs{});
    FAIL() << "expected a deadlock";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("deadlocks"), std::string::npos) << e.what();
  }
}

TEST(Schedule, CommunicationDelaysCrossRankDependencies) {
  Schedule s = make_1f1b(4, 8);
  add_p2p(s);
  const double without = simulate(s, Costs{1, 1, 1, 0}).makespan;
  const double with = simulate(s, Costs{1, 1, 1, 0.5}).makespan;
  // The critical path crosses 3 forward and 3 backward links at least once each.
  EXPECT_GE(with, without + 6 * 0.5 - 1e-9);
}

}  // namespace
