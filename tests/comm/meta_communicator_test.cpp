// The meta communicator: one rank standing for a group of any size. Group shapes are checked against
// the rank formula (ParallelState::coords_of), payload counts against the rule in communicator.h.
// (tests/mpi/parallel_state_test.cpp compares its groups with MPI's.)
#include <gtest/gtest.h>

#include <vector>

#include "support/error_of.h"
#include "tessel/comm/parallel_state.h"

using namespace tessel;
using namespace tessel::comm;

TEST(MetaCommunicator, CountsEveryPayloadByTheRuleAndTouchesNoMemory) {
  auto c = make_meta_communicator(3, 8);
  EXPECT_EQ(c->rank(), 3);
  EXPECT_EQ(c->size(), 8);
  EXPECT_STREQ(c->backend(), "meta");
  // No buffer at all: a meta tensor's data pointer is null.
  c->all_reduce(nullptr, 1000, DType::bf16, ReduceOp::sum);             // 2,000 B
  c->all_gather(nullptr, nullptr, 10, DType::f32);                      // own block: 40 B
  c->reduce_scatter_async(nullptr, nullptr, 10, DType::f32, ReduceOp::sum)->wait();  // 8 x 10 x 4 = 320 B
  c->all_to_all_v(nullptr, {1, 2, 3, 4, 5, 6, 7, 8}, nullptr, {8, 7, 6, 5, 4, 3, 2, 1}, DType::bf16);  // 36 x 2
  c->all_gather_v(nullptr, nullptr, {1, 2, 3, 4, 5, 6, 7, 8}, DType::i64);  // counts[3] = 4: 32 B
  c->send(nullptr, 16, DType::f32, 4, 0);                              // 64 B
  c->recv(nullptr, 16, DType::f32, 2, 0);                              // not counted
  const auto& st = c->stats();
  EXPECT_EQ(st.at("all_reduce").bytes, 2000);
  EXPECT_EQ(st.at("all_gather").bytes, 40 + 32);
  EXPECT_EQ(st.at("all_gather").calls, 2);
  EXPECT_EQ(st.at("reduce_scatter").bytes, 320);
  EXPECT_EQ(st.at("all_to_all").bytes, 72);
  EXPECT_EQ(st.at("send").bytes, 64);
  EXPECT_EQ(st.count("recv"), 0u);
}

TEST(MetaCommunicator, RefusesCountsAndPeersThatDoNotFitTheGroup) {
  auto c = make_meta_communicator(0, 4);
  EXPECT_EQ(tessel::testing::error_of([&] { c->all_gather_v(nullptr, nullptr, {1, 2}, DType::f32); }),
            "all_gather_v: 2 counts for 4 ranks");
  EXPECT_EQ(tessel::testing::error_of([&] { c->send(nullptr, 1, DType::f32, 4, 0); }), "send to rank 4: the group has 4 ranks");
  EXPECT_EQ(tessel::testing::error_of([&] { c->split(0, 0); }),
            "meta communicator: split(color, key) cannot see the other ranks' colors; use split_by with a rule for "
            "every rank");
  EXPECT_EQ(tessel::testing::error_of([] { make_meta_communicator(4, 4); }), "meta communicator: rank 4 of 4 ranks");
}

TEST(MetaCommunicator, SplitByOrdersMembersByKeyThenRank) {
  auto c = make_meta_communicator(5, 8);
  // Odd and even ranks, ordered by descending rank: rank 5 is the 2nd of {7, 5, 3, 1}.
  auto g = c->split_by([](int r) { return std::pair<int, int>{r % 2, -r}; });
  EXPECT_EQ(g->size(), 4);
  EXPECT_EQ(g->rank(), 1);
  EXPECT_EQ(c->split_by([](int r) { return std::pair<int, int>{r == 5 ? -1 : 0, 0}; }), nullptr);
}

// DeepSeek-V3's published layout: 2,048 ranks, PP 16, EP 64, data parallel 128 (no TP or CP).
TEST(MetaCommunicator, BuildsTheGroupsOfTwoThousandRanksWithoutOtherProcesses) {
  const ParallelSizes s{1, 1, 16, 64};
  for (int rank : {0, 1, 127, 128, 1000, 2047}) {
    auto w = make_meta_communicator(rank, 2048);
    ParallelState ps(*w, s);
    const RankCoords me = ParallelState::coords_of(rank, s, 128);
    EXPECT_EQ(ps.dp_size(), 128);
    EXPECT_EQ(ps.dp().size(), 128);
    EXPECT_EQ(ps.dp().rank(), me.dp);
    EXPECT_EQ(ps.pp().size(), 16);
    EXPECT_EQ(ps.pp().rank(), me.pp);
    EXPECT_EQ(ps.tp().size(), 1);
    EXPECT_EQ(ps.ep().size(), 64);
    EXPECT_EQ(ps.ep().rank(), me.dp % 64);  // consecutive data-parallel ranks share out the experts
    EXPECT_EQ(ps.ep_dp().size(), 2);
    EXPECT_EQ(ps.ep_dp().rank(), me.dp / 64);
    EXPECT_EQ(ps.embedding() != nullptr, me.pp == 0 || me.pp == 15);
  }
}
