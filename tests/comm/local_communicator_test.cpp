// The one-rank backend and the group decomposition arithmetic (no MPI needed).
#include <gtest/gtest.h>

#include <vector>

#include "tessel/comm/parallel_state.h"
#include "tessel/core/check.h"

using namespace tessel;
using namespace tessel::comm;

TEST(LocalCommunicator, CollectivesAreIdentities) {
  auto c = make_local_communicator();
  EXPECT_EQ(c->size(), 1);
  std::vector<float> a{1, 2, 3}, b(3);
  c->all_reduce(a.data(), 3, DType::f32, ReduceOp::sum);
  EXPECT_EQ(a, (std::vector<float>{1, 2, 3}));
  c->all_gather(a.data(), b.data(), 3, DType::f32);
  EXPECT_EQ(b, a);
  std::vector<int64_t> x{7, 8}, y(2);
  c->reduce_scatter(x.data(), y.data(), 2, DType::i64, ReduceOp::max);
  EXPECT_EQ(y, x);
  c->all_reduce_async(a.data(), 3, DType::f32, ReduceOp::sum)->wait();
  EXPECT_THROW(c->send(a.data(), 1, DType::f32, 1, 0), Error);
  EXPECT_EQ(c->split(-1, 0), nullptr);
  ParallelState ps(*c, {});
  EXPECT_EQ(ps.dp_size(), 1);
  EXPECT_TRUE(ps.is_first_stage() && ps.is_last_stage());
  EXPECT_NE(ps.embedding(), nullptr);
}

TEST(ParallelState, RankDecompositionIsMegatronOrder) {
  const ParallelSizes s{2, 2, 2, 1};  // tp 2, cp 2, pp 2, dp 2: 16 ranks
  for (int r = 0; r < 16; ++r) {
    const auto c = ParallelState::coords_of(r, s, 2);
    EXPECT_EQ(ParallelState::rank_of(c, s, 2), r);
  }
  // TP fastest, then CP, then DP, then PP.
  EXPECT_EQ(ParallelState::coords_of(1, s, 2).tp, 1);
  EXPECT_EQ(ParallelState::coords_of(2, s, 2).cp, 1);
  EXPECT_EQ(ParallelState::coords_of(4, s, 2).dp, 1);
  EXPECT_EQ(ParallelState::coords_of(8, s, 2).pp, 1);
}

TEST(ParallelState, SizesThatDoNotDivideTheWorldAreRefused) {
  auto c = make_local_communicator();
  try {
    ParallelState ps(*c, {2, 1, 1, 1});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not divisible"), std::string::npos) << e.what();
  }
}
