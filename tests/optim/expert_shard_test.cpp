// The distributed optimizer's shard under expert parallelism (nn/flat_shard.h): the replicated
// parameters are sharded over the data-parallel group and the routed experts over the ranks holding
// the same experts, as Megatron-LM does, instead of everything over the smaller expert group.
// Checked against offsets worked out by hand, against the partition property (every element owned
// by exactly one rank of each region's group), and a sharded bf16 store's update against the
// whole store's update of the same elements, to the bit.
#include <gtest/gtest.h>

#include <set>
#include <tuple>
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

// a [0, 4), e1 [4, 10) expert, b [10, 13), e2 [13, 18) expert, c [18, 20): five units, each a run
// of one kind. Under dp 4 (the replicated units' group) and expert-data-parallel 2 (the experts'),
// rank 1 of both owns block 1 of each unit: a [1, 2) (counts 1,1,1,1), e1 [7, 10) (3,3), b [11, 12)
// (1,1,1,0), e2 [16, 18) (3,2), c [19, 20) (1,1,0,0): 8 elements, packed in that order.
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
  Store st(DType::f32, {1, 4}, {1, 2});
  const nn::FlatShard& f = st.ps.shard();
  ASSERT_EQ(f.units().size(), 5u);
  const std::vector<std::vector<int64_t>> counts = {{1, 1, 1, 1}, {3, 3}, {1, 1, 1, 0}, {3, 2}, {1, 1, 0, 0}};
  const std::vector<std::pair<int64_t, int64_t>> own = {{1, 2}, {7, 10}, {11, 12}, {16, 18}, {19, 20}};
  for (size_t u = 0; u < 5; ++u) {
    EXPECT_EQ(f.units()[u].experts, u == 1 || u == 3) << u;
    EXPECT_EQ(f.units()[u].counts, counts[u]) << u;
    EXPECT_EQ(f.units()[u].own_begin, own[u].first) << u;
    EXPECT_EQ(f.units()[u].own_end, own[u].second) << u;
  }
  EXPECT_EQ(f.local_numel(), 8);
  EXPECT_EQ(f.describe(), "8 of 20 elements in 5 units: [1, 2), [7, 10), [11, 12), [16, 18), ...");
  const auto part = [&](const std::string& name) { return f.part_of(st.ps.spec(name)); };
  const std::vector<std::tuple<std::string, int64_t, int64_t, int64_t>> parts = {
      {"a", 1, 2, 0}, {"layer.mlp.experts.0.w", 7, 10, 1}, {"b", 11, 12, 4}, {"layer.mlp.experts.1.w", 16, 18, 5},
      {"c", 19, 20, 7}};
  for (const auto& [name, b, e, local] : parts) {
    ASSERT_TRUE(part(name)) << name;
    EXPECT_EQ(part(name)->flat_begin, b) << name;
    EXPECT_EQ(part(name)->flat_end, e) << name;
    EXPECT_EQ(part(name)->local_begin, local) << name;
  }
  // The optimizer keeps moments for those 8 elements, not for 1/2 of all 20.
  optim::AdamW opt(st.ps, {});
  EXPECT_EQ(opt.exp_avg().numel(), 8);
}

TEST(ExpertShard, EveryElementIsOwnedByOneRankOfEachUnitsGroup) {
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
  // The packed fp32 copy: b and c, flat order; per unit the f32 elements of each rank's block.
  EXPECT_EQ(sharded.ps.f32_copy().numel(), 5);
  EXPECT_EQ(sharded.ps.f32_copy_unit_begin(2), 0);  // b
  EXPECT_EQ(sharded.ps.f32_copy_unit_begin(4), 3);  // c
  EXPECT_EQ(sharded.ps.f32_copy_counts(2), (std::vector<int64_t>{1, 1, 1, 0}));
  EXPECT_EQ(sharded.ps.f32_copy_counts(4), (std::vector<int64_t>{1, 1, 0, 0}));
  EXPECT_EQ(sharded.ps.f32_copy_counts(1), (std::vector<int64_t>{0, 0}));  // e1: none computes in fp32
  EXPECT_NE(testing::error_of([&] { (void)sharded.ps.param_at(0, {2, 2}); })
                .find("this rank holds elements 8 of 20 elements in 5 units: [1, 2), [7, 10)"),
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
  // Packed: flat 1, 7..9, 11, 16, 17, 19.
  const std::vector<int64_t> owned = {1, 7, 8, 9, 11, 16, 17, 19};
  std::vector<float> expected, initial;
  for (const int64_t i : owned) {
    expected.push_back(after[size_t(i)]);
    initial.push_back(before[size_t(i)]);
  }
  EXPECT_NE(expected, initial);
  EXPECT_EQ(floats(sharded.ps.masters()), expected);
  const std::vector<float> copy = floats(sharded.ps.compute_at(0, {20})), ref = floats(whole.ps.compute_at(0, {20}));
  for (const int64_t i : owned) EXPECT_EQ(copy[size_t(i)], ref[size_t(i)]) << "bf16 copy, element " << i;
  // b's fp32 copy: its owned element updated, the others as they were (other shards', gathered by
  // the trainer after the step).
  const std::vector<float> b32 = floats(sharded.ps.f32_at(10, {3}));
  EXPECT_EQ(b32[0], before[10]);
  EXPECT_EQ(b32[1], after[11]);
  EXPECT_EQ(b32[2], before[12]);
  EXPECT_NE(after[11], before[11]);
}

}  // namespace
}  // namespace tessel
