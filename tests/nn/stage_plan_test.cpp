// Pipeline stage plans: which layers each rank's chunks hold, against the layouts written out by hand.
#include <gtest/gtest.h>

#include "tessel/core/check.h"
#include "tessel/nn/stage_plan.h"

using namespace tessel;

namespace {

nn::ModelConfig layers(int64_t n) {
  nn::ModelConfig c;
  c.num_layers = n;
  return c;
}

std::vector<std::pair<int64_t, int64_t>> ranges(const nn::StagePlan& p) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const auto& r : p.chunks) out.emplace_back(r.begin, r.end);
  return out;
}

using Ranges = std::vector<std::pair<int64_t, int64_t>>;

TEST(StagePlan, EvenSplitWithVirtualStagesInterleavesRanks) {
  // 8 layers, pp 2, vpp 2: virtual stages 0..3 hold 2 layers each; rank r holds stages r and 2 + r.
  const auto r0 = nn::pipeline_plan(layers(8), 2, 2, 0, {});
  const auto r1 = nn::pipeline_plan(layers(8), 2, 2, 1, {});
  EXPECT_EQ(ranges(r0), (Ranges{{0, 2}, {4, 6}}));
  EXPECT_EQ(ranges(r1), (Ranges{{2, 4}, {6, 8}}));
  EXPECT_TRUE(r0.has_embedding);
  EXPECT_FALSE(r0.has_head);
  EXPECT_FALSE(r1.has_embedding);
  EXPECT_TRUE(r1.has_head);
  EXPECT_FALSE(r0.whole());
  EXPECT_TRUE(nn::whole_model_plan(layers(8)).whole());
}

TEST(StagePlan, AVPutsTheFirstAndLastStagesOnRankZero) {
  // 8 layers, pp 2, a V of 4 stages: rank 0 holds stages 0 and 3, rank 1 stages 1 and 2.
  const auto r0 = nn::pipeline_plan(layers(8), 2, 2, 0, {}, nn::ChunkOrder::v_shape);
  const auto r1 = nn::pipeline_plan(layers(8), 2, 2, 1, {}, nn::ChunkOrder::v_shape);
  EXPECT_EQ(ranges(r0), (Ranges{{0, 2}, {6, 8}}));
  EXPECT_EQ(ranges(r1), (Ranges{{2, 4}, {4, 6}}));
  EXPECT_TRUE(r0.has_embedding && r0.has_head);
  EXPECT_FALSE(r1.has_embedding || r1.has_head);
  // Uneven stages are taken in stage order along the V.
  const auto u = nn::pipeline_plan(layers(7), 2, 2, 1, nn::parse_layer_list("1,2,3,1", "k"), nn::ChunkOrder::v_shape);
  EXPECT_EQ(ranges(u), (Ranges{{1, 3}, {3, 6}}));
  EXPECT_THROW(nn::pipeline_plan(layers(8), 2, 4, 0, {}, nn::ChunkOrder::v_shape), tessel::Error);
}

TEST(StagePlan, DualPipeRanksRAndPMinus1MinusRHoldTheSameTwoStagesAlike) {
  // 8 layers, pp 4, 4 stages of 2: ranks 0 and 3 hold stages 0 and 3, ranks 1 and 2 stages 1 and 2.
  for (int r : {0, 3}) {
    const auto p = nn::pipeline_plan(layers(8), 4, 2, r, {}, nn::ChunkOrder::dual);
    EXPECT_EQ(ranges(p), (Ranges{{0, 2}, {6, 8}})) << r;
    EXPECT_TRUE(p.has_embedding && p.has_head) << r;
  }
  for (int r : {1, 2}) {
    const auto p = nn::pipeline_plan(layers(8), 4, 2, r, {}, nn::ChunkOrder::dual);
    EXPECT_EQ(ranges(p), (Ranges{{2, 4}, {4, 6}})) << r;
    EXPECT_FALSE(p.has_embedding || p.has_head) << r;
  }
  EXPECT_THROW(nn::pipeline_plan(layers(6), 3, 2, 0, {}, nn::ChunkOrder::dual), tessel::Error);  // odd pp
}

TEST(StagePlan, ExplicitLayersPerStage) {
  const auto plan = nn::pipeline_plan(layers(7), 3, 1, 1, nn::parse_layer_list("3,2,2", "k"));
  EXPECT_EQ(ranges(plan), (Ranges{{3, 5}}));
  EXPECT_FALSE(plan.has_embedding);
  EXPECT_FALSE(plan.has_head);
}

TEST(StagePlan, BadLayoutsAreRefusedWithTheKey) {
  EXPECT_THROW(nn::pipeline_plan(layers(7), 2, 1, 0, {}), Error);         // uneven
  EXPECT_THROW(nn::pipeline_plan(layers(7), 2, 1, 0, {3, 3}), Error);     // sums to 6
  EXPECT_THROW(nn::pipeline_plan(layers(7), 2, 1, 0, {7, 0}), Error);     // an empty stage
  EXPECT_THROW(nn::pipeline_plan(layers(7), 2, 1, 0, {3, 2, 2}), Error);  // 3 entries for 2 stages
  EXPECT_THROW(nn::parse_layer_list("3;4", "k"), Error);
  EXPECT_TRUE(nn::parse_layer_list("", "k").empty());
}

}  // namespace
