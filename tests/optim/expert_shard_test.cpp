// The distributed optimizer's shard under expert parallelism (nn/flat_shard.h): the replicated
// parameters are sharded over the data-parallel group and the routed experts over the ranks holding
// the same experts, as Megatron-LM does, instead of everything over the smaller expert group.
// Checked against offsets worked out by hand, against the partition property (every element owned
// by exactly one rank of each region's group), and a sharded bf16 store's update against the
// whole store's update of the same elements, to the bit.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "support/error_of.h"
#include "support/host_access.h"
#include "tessel/core/rng.h"
#include "tessel/nn/flat_shard.h"
#include "tessel/nn/params.h"
#include "tessel/optim/adamw.h"

namespace tessel {
namespace {

// a [0, 4), e1 [4, 10) expert, b [10, 13), e2 [13, 18) expert, c [18, 20).
// Region 0 (replicated): a, b, c = 9 elements in region order; region 1 (experts): e1, e2 = 11.
struct Store {
  nn::ParamStore ps;
  Store(DType compute, nn::MasterShard replicated, nn::MasterShard experts) : ps(compute) {
    ps.add("a", {2, 2}, nn::Init::normal, 0.02f, true);
    const int64_t e1 = ps.add("layer.mlp.experts.0.w", {2, 3}, nn::Init::normal, 0.02f, true);
    ps.mark_f32_compute(ps.add("b", {3}, nn::Init::zeros, 0, false));
    ps.add("layer.mlp.experts.1.w", {5}, nn::Init::normal, 0.02f, true);
    ps.mark_expert_range(e1, e1 + 6);
    ps.mark_expert_range(13, 18);
    ps.mark_f32_compute(ps.add("c", {2}, nn::Init::ones, 0, true));
    ps.finalize(replicated, experts);
    std::vector<float> values(size_t(ps.numel()));
    for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5f * philox_normal(5, 1, uint64_t(i));
    for (const auto& s : ps.specs()) ps.set_values(s, Tensor::from_blob(values.data() + s.offset, s.shape, DType::f32));
    ps.mark_updated();
    for (int64_t i = 0; i < ps.numel(); ++i) ps.grads_data()[i] = philox_normal(5, 60, uint64_t(i));
  }
};

std::vector<float> floats(const Tensor& t) {
  const Tensor f = t.to(DType::f32);
  return std::vector<float>(f.data<float>(), f.data<float>() + f.numel());
}

TEST(ExpertShard, ReplicatedParametersShardOverDataParallelExpertsOverTheirOwnGroup) {
  const tessel::testing::HostAccess host;
  // dp 4 (replicated: 9 elements in blocks of 3, 3, 3, 0), expert-data-parallel 2 (11: 6, 5);
  // this rank is dp rank 1 and expert rank 1.
  Store st(DType::f32, {1, 4}, {1, 2});
  const nn::FlatShard& f = st.ps.shard();
  ASSERT_EQ(f.regions().size(), 2u);
  EXPECT_EQ(f.regions()[0].counts, (std::vector<int64_t>{3, 3, 3, 0}));
  EXPECT_EQ(f.regions()[1].counts, (std::vector<int64_t>{6, 5}));
  EXPECT_FALSE(f.regions()[0].contiguous());
  // Region order of the replicated parameters: a [0, 4), b [4, 7), c [7, 9). Block 1 is [3, 6): a's
  // last element (flat 3) and b's first two (flat 10, 11). The experts' block 1 is [6, 11): e2, flat [13, 18).
  EXPECT_EQ(f.describe(), "[3, 6) of 9 replicated elements and [6, 11) of 11 expert elements");
  EXPECT_EQ(f.local_numel(), 8);
  const auto part = [&](const std::string& name) { return f.part_of(st.ps.spec(name)); };
  ASSERT_TRUE(part("a"));
  EXPECT_EQ(part("a")->flat_begin, 3);
  EXPECT_EQ(part("a")->flat_end, 4);
  EXPECT_EQ(part("a")->local_begin, 0);
  ASSERT_TRUE(part("b"));
  EXPECT_EQ(part("b")->flat_begin, 10);
  EXPECT_EQ(part("b")->flat_end, 12);
  EXPECT_EQ(part("b")->local_begin, 1);
  EXPECT_FALSE(part("c"));
  EXPECT_FALSE(part("layer.mlp.experts.0.w"));
  ASSERT_TRUE(part("layer.mlp.experts.1.w"));
  EXPECT_EQ(part("layer.mlp.experts.1.w")->flat_begin, 13);
  EXPECT_EQ(part("layer.mlp.experts.1.w")->flat_end, 18);
  EXPECT_EQ(part("layer.mlp.experts.1.w")->local_begin, 3);
  // The optimizer keeps moments for those 8 elements, not for 1/2 of all 20.
  optim::AdamW opt(st.ps, {});
  EXPECT_EQ(opt.exp_avg().numel(), 8);
}

TEST(ExpertShard, EveryElementIsOwnedByOneRankOfEachRegionsGroup) {
  const tessel::testing::HostAccess host;
  const int dp = 3, ep_dp = 2;
  std::vector<int> owners(20, 0);
  std::vector<std::set<int>> owning_dp_rank(20), owning_expert_rank(20);
  for (int r = 0; r < dp; ++r)
    for (int x = 0; x < ep_dp; ++x) {
      Store st(DType::f32, {r, dp}, {x, ep_dp});
      const nn::FlatShard& f = st.ps.shard();
      int64_t local = 0;
      for (const auto& s : st.ps.specs())
        if (const auto p = f.part_of(s)) {
          local += p->flat_end - p->flat_begin;
          for (int64_t i = p->flat_begin; i < p->flat_end; ++i) {
            (s.expert ? owning_expert_rank : owning_dp_rank)[size_t(i)].insert(s.expert ? x : r);
            ++owners[size_t(i)];
          }
        }
      EXPECT_EQ(local, f.local_numel());
    }
  // Each replicated element is owned by one dp rank (and so by the ep_dp combinations of it), each
  // expert element by one expert rank (times dp).
  for (int i = 0; i < 20; ++i) {
    const bool expert = (i >= 4 && i < 10) || (i >= 13 && i < 18);
    EXPECT_EQ(owners[size_t(i)], expert ? dp : ep_dp) << "element " << i;
    EXPECT_EQ((expert ? owning_expert_rank : owning_dp_rank)[size_t(i)].size(), 1u) << "element " << i;
  }
}

TEST(ExpertShard, ShardedMastersUpdateAsTheWholeStoreToTheBit) {
  const tessel::testing::HostAccess host;
  Store sharded(DType::bf16, {1, 4}, {1, 2}), whole(DType::bf16, {}, {});
  ASSERT_TRUE(sharded.ps.masters_sharded());
  ASSERT_FALSE(whole.ps.masters_sharded());
  EXPECT_EQ(sharded.ps.masters().numel(), 8);
  // The packed fp32 copy: region 0's b and c first, then region 1's (none).
  EXPECT_EQ(sharded.ps.f32_copy().numel(), 5);
  EXPECT_EQ(sharded.ps.f32_copy_region_begin(1), 5);
  EXPECT_EQ(sharded.ps.f32_copy_counts(0), (std::vector<int64_t>{0, 2, 3, 0}));  // b [4, 7), c [7, 9) by block
  EXPECT_EQ(sharded.ps.f32_copy_counts(1), (std::vector<int64_t>{0, 0}));
  EXPECT_NE(testing::error_of([&] { (void)sharded.ps.param_at(0, {2, 2}); })
                .find("this rank holds elements [3, 6) of 9 replicated elements and [6, 11) of 11 expert elements"),
            std::string::npos);
  optim::AdamWConfig cfg;
  cfg.weight_decay = 0.1;
  cfg.clip_grad = 0;  // the update is elementwise: owning more elements changes none of these
  optim::AdamW a(sharded.ps, cfg), b(whole.ps, cfg);
  const std::vector<float> before = floats(whole.ps.params_flat());
  for (int step = 0; step < 3; ++step) {
    a.step(2e-2);
    b.step(2e-2);
  }
  const std::vector<float> after = floats(whole.ps.params_flat());
  // Packed: flat 3, 10, 11, then 13..17.
  const std::vector<int64_t> owned = {3, 10, 11, 13, 14, 15, 16, 17};
  std::vector<float> expected, initial;
  for (const int64_t i : owned) {
    expected.push_back(after[size_t(i)]);
    initial.push_back(before[size_t(i)]);
  }
  EXPECT_NE(expected, initial);
  EXPECT_EQ(floats(sharded.ps.masters()), expected);
  const std::vector<float> copy = floats(sharded.ps.compute_at(0, {20})), ref = floats(whole.ps.compute_at(0, {20}));
  for (const int64_t i : owned) EXPECT_EQ(copy[size_t(i)], ref[size_t(i)]) << "bf16 copy, element " << i;
  // b's fp32 copy: its two owned elements updated, the third as it was (another shard's).
  const std::vector<float> b32 = floats(sharded.ps.f32_at(10, {3}));
  EXPECT_EQ(b32[0], after[10]);
  EXPECT_EQ(b32[1], after[11]);
  EXPECT_EQ(b32[2], before[12]);
}

}  // namespace
}  // namespace tessel
