// ParallelState groups under every factorisation of the world: each group holds exactly the ranks
// whose other coordinates match (computed here by brute force from the rank formula).
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "tessel/comm/parallel_state.h"
#include "tessel/core/check.h"
#include "mpi/mpi_world.h"

using namespace tessel;
using namespace tessel::comm;

namespace {

using tessel::testing::world;

std::set<int> members(Communicator& g) {
  int me = world().rank();
  std::vector<int> all(size_t(g.size()));
  g.all_gather(&me, all.data(), 1, DType::i32);
  return {all.begin(), all.end()};
}

std::set<int> expected(const ParallelSizes& s, int dp, int W, const RankCoords& me, bool (*same)(const RankCoords&,
                                                                                                 const RankCoords&)) {
  std::set<int> out;
  for (int r = 0; r < W; ++r)
    if (same(ParallelState::coords_of(r, s, dp), me)) out.insert(r);
  return out;
}

TEST(ParallelStateMpi, GroupsMatchTheRankFormulaForEveryFactorisation) {
  const int W = world().size();
  int checked = 0;
  for (int tp = 1; tp <= W; ++tp)
    for (int cp = 1; cp <= W; ++cp)
      for (int pp = 1; pp <= W; ++pp) {
        if (W % (tp * cp * pp)) continue;
        const ParallelSizes s{tp, cp, pp, 1};
        ParallelState ps(world(), s);
        const int dp = ps.dp_size();
        const RankCoords me = ps.coords();
        EXPECT_EQ(ParallelState::rank_of(me, s, dp), world().rank());
        EXPECT_EQ(members(ps.tp()), expected(s, dp, W, me, [](const RankCoords& a, const RankCoords& b) {
                    return a.cp == b.cp && a.dp == b.dp && a.pp == b.pp;
                  })) << ps.describe();
        EXPECT_EQ(members(ps.cp()), expected(s, dp, W, me, [](const RankCoords& a, const RankCoords& b) {
                    return a.tp == b.tp && a.dp == b.dp && a.pp == b.pp;
                  })) << ps.describe();
        EXPECT_EQ(members(ps.dp()), expected(s, dp, W, me, [](const RankCoords& a, const RankCoords& b) {
                    return a.tp == b.tp && a.cp == b.cp && a.pp == b.pp;
                  })) << ps.describe();
        EXPECT_EQ(members(ps.pp()), expected(s, dp, W, me, [](const RankCoords& a, const RankCoords& b) {
                    return a.tp == b.tp && a.cp == b.cp && a.dp == b.dp;
                  })) << ps.describe();
        EXPECT_EQ(members(ps.dp_cp()), expected(s, dp, W, me, [](const RankCoords& a, const RankCoords& b) {
                    return a.tp == b.tp && a.pp == b.pp;
                  })) << ps.describe();
        // Group ranks are ordered by the varying coordinate.
        EXPECT_EQ(ps.tp().rank(), me.tp);
        EXPECT_EQ(ps.pp().rank(), me.pp);
        const bool edge = me.pp == 0 || me.pp == pp - 1;
        ASSERT_EQ(ps.embedding() != nullptr, edge);
        if (edge) {
          EXPECT_EQ(ps.embedding()->size(), pp == 1 ? 1 : 2);
        }
        ++checked;
      }
  EXPECT_GE(checked, 4);
}

TEST(ParallelStateMpi, ExpertGroupsAreCarvedFromDataTimesContext) {
  const int W = world().size();
  if (W % 2) GTEST_SKIP() << "needs an even world";
  ParallelState ps(world(), {1, 1, 1, 2});
  EXPECT_EQ(ps.ep().size(), 2);
  EXPECT_EQ(members(ps.ep()), (std::set<int>{world().rank() / 2 * 2, world().rank() / 2 * 2 + 1}));
}

TEST(ParallelStateMpi, MisconfigurationFailsOnEveryRank) {
  const int W = world().size();
  try {
    ParallelState ps(world(), {W + 1, 1, 1, 1});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not divisible"), std::string::npos) << e.what();
  }
}

}  // namespace

// The meta world (comm/meta.cpp) builds every group from the same rules without other processes:
// for each layout, each group's size and this rank's place in it equal those MPI built.
TEST(ParallelStateMpi, TheMetaWorldBuildsTheSameGroupsAsMpi) {
  const int W = world().size();
  int checked = 0;
  for (int tp = 1; tp <= W; ++tp)
    for (int cp = 1; cp <= W; ++cp)
      for (int pp = 1; pp <= W; ++pp)
        for (int ep = 1; ep <= W; ++ep) {
          if (W % (tp * cp * pp) || ((W / (tp * cp * pp)) * cp) % ep) continue;
          const ParallelSizes s{tp, cp, pp, ep};
          ParallelState real(world(), s);
          auto meta_world = make_meta_communicator(world().rank(), W);
          ParallelState meta(*meta_world, s);
          for (auto group : {&ParallelState::tp, &ParallelState::cp, &ParallelState::dp, &ParallelState::pp,
                             &ParallelState::dp_cp, &ParallelState::ep, &ParallelState::ep_dp}) {
            EXPECT_EQ((meta.*group)().size(), (real.*group)().size()) << real.describe();
            EXPECT_EQ((meta.*group)().rank(), (real.*group)().rank()) << real.describe();
          }
          ASSERT_EQ(meta.embedding() != nullptr, real.embedding() != nullptr);
          if (real.embedding()) {
            EXPECT_EQ(meta.embedding()->size(), real.embedding()->size());
            EXPECT_EQ(meta.embedding()->rank(), real.embedding()->rank());
          }
          ++checked;
        }
  EXPECT_GE(checked, 4);
}
