// Sharded fp32 masters (the distributed optimizer in bf16 runs, nn/params.h): the store of one rank
// holds its shard of the masters, a whole bf16 copy and a whole fp32 copy of the parameters marked
// f32_compute, refuses the whole masters by name, and its update equals the unsharded store's update
// of the same range to the bit (masters, bf16 copy, fp32 copy), the reference being that store.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/error_of.h"
#include "support/host_access.h"
#include "tessel/core/rng.h"
#include "tessel/nn/embedding.h"
#include "tessel/nn/params.h"
#include "tessel/optim/adamw.h"

namespace tessel {
namespace {

// w [0, 12) computes through the bf16 copy; b [12, 16) and norm [16, 21) in fp32. Three shards of 7
// elements: rank 1 holds [7, 14), which cuts w and b.
struct Store {
  nn::ParamStore ps{DType::bf16};
  explicit Store(nn::MasterShard shard) {
    ps.add("w", {3, 4}, nn::Init::normal, 0.02f, true);
    ps.mark_f32_compute(ps.add("b", {4}, nn::Init::zeros, 0, false));
    ps.mark_f32_compute(ps.add("norm", {5}, nn::Init::ones, 0, true));
    ps.finalize(shard);
    std::vector<float> values(size_t(ps.numel()));
    for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5f * philox_normal(3, 1, uint64_t(i));
    for (const auto& s : ps.specs())
      ps.set_values(s, Tensor::from_blob(values.data() + s.offset, s.shape, DType::f32));
    ps.mark_updated();
    for (int64_t i = 0; i < ps.numel(); ++i) ps.grads_data()[i] = philox_normal(3, 60, uint64_t(i));
  }
};

std::vector<float> floats(const Tensor& t) {
  const Tensor f = t.to(DType::f32);
  return std::vector<float>(f.data<float>(), f.data<float>() + f.numel());
}

TEST(ShardedMasters, TheStoreHoldsItsShardAndRefusesTheWholeMastersByName) {
  const tessel::testing::HostAccess host;
  Store st(nn::MasterShard{1, 3});
  const nn::ParamStore& ps = st.ps;
  EXPECT_TRUE(ps.masters_sharded());
  EXPECT_EQ(ps.shard().describe(), "[7, 14) of 21");
  EXPECT_EQ(ps.masters().numel(), 7);
  EXPECT_EQ(ps.f32_copy().numel(), 9);  // b and norm, whole
  EXPECT_EQ(ps.f32_copy_counts(), (std::vector<int64_t>{0, 2, 7}));  // b's [12, 14) in shard 1
  EXPECT_NE(testing::error_of([&] { (void)ps.param_at(0, {3, 4}); })
                .find("param_at of 'w': the fp32 master weights are sharded over the distributed optimizer's ranks "
                      "(this rank holds elements [7, 14) of 21)"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { (void)ps.params_flat(); }).find("params_flat: the fp32 master weights are sharded"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { (void)ps.f32_at(0, {3, 4}); }).find("'w' is not marked f32_compute"),
            std::string::npos);
  // b and norm fused (adjacent, both fp32): one view of the packed copy.
  EXPECT_EQ(ps.f32_at(12, {9}).numel(), 9);
  // The values written: the shard of the masters, the whole copies.
  Store whole(nn::MasterShard{});
  EXPECT_FALSE(whole.ps.masters_sharded());
  const std::vector<float> all = floats(whole.ps.params_flat());
  EXPECT_EQ(floats(ps.masters()), std::vector<float>(all.begin() + 7, all.begin() + 14));
  EXPECT_EQ(floats(ps.f32_at(12, {9})), std::vector<float>(all.begin() + 12, all.end()));
  EXPECT_EQ(floats(ps.compute_at(0, {21})), floats(whole.ps.compute_at(0, {21})));
}

TEST(ShardedMasters, TheShardsUpdateEqualsTheWholeStoresUpdateOfItsRangeToTheBit) {
  const tessel::testing::HostAccess host;
  Store sharded(nn::MasterShard{1, 3}), whole(nn::MasterShard{});
  optim::AdamWConfig cfg;
  cfg.weight_decay = 0.1;
  cfg.clip_grad = 0;
  optim::AdamW a(sharded.ps, cfg, 7, 14), b(whole.ps, cfg, 7, 14);
  const std::vector<float> before = floats(whole.ps.params_flat());
  for (int step = 0; step < 3; ++step) {
    a.step(2e-2);
    b.step(2e-2);
  }
  const std::vector<float> after = floats(whole.ps.params_flat());
  EXPECT_NE(after, before);
  EXPECT_EQ(floats(sharded.ps.masters()), std::vector<float>(after.begin() + 7, after.begin() + 14));
  const std::vector<float> copy = floats(sharded.ps.compute_at(0, {21})), ref = floats(whole.ps.compute_at(0, {21}));
  EXPECT_EQ(std::vector<float>(copy.begin() + 7, copy.begin() + 14), std::vector<float>(ref.begin() + 7, ref.begin() + 14));
  // The fp32 copy of b: its part in the shard updated, the rest as it was (another shard's, gathered
  // by the trainer after the step).
  const std::vector<float> f32 = floats(sharded.ps.f32_at(12, {4}));
  EXPECT_EQ(std::vector<float>(f32.begin(), f32.begin() + 2), std::vector<float>(after.begin() + 12, after.begin() + 14));
  EXPECT_EQ(std::vector<float>(f32.begin() + 2, f32.end()), std::vector<float>(before.begin() + 14, before.begin() + 16));
  // An optimizer over any other range than the masters' shard is refused.
  EXPECT_NE(testing::error_of([&] { optim::AdamW bad(sharded.ps, cfg, 0, 7); })
                .find("AdamW: owned range [0, 7) of 21 is not the masters' shard [7, 14) of 21"),
            std::string::npos);
}

// precision.fp32_embedding off in a bf16 run (Megatron-LM's layout): the token table is looked up
// from the bf16 copy, so each output row is the master row rounded to bf16, and a store with sharded
// masters keeps no whole fp32 copy of the table. On (the default): the rows are the fp32 masters and
// the whole table is kept in fp32. The reference is an unsharded store's masters.
TEST(ShardedMasters, AnEmbeddingLookedUpInBf16KeepsNoWholeFp32Table) {
  const tessel::testing::HostAccess host;
  nn::ModelConfig cfg;
  cfg.vocab_size = 10;
  cfg.hidden_size = 6;
  cfg.seq_length = 4;
  cfg.compute = DType::bf16;
  const int64_t ids[4] = {9, 0, 4, 9};
  for (const bool fp32_embedding : {false, true}) {
    SCOPED_TRACE(fp32_embedding ? "fp32 lookup" : "bf16 lookup");
    cfg.fp32_embedding = fp32_embedding;
    nn::ParamStore whole(DType::bf16), sharded(DType::bf16);
    nn::Embedding e_whole(whole, cfg), e_sharded(sharded, cfg);
    whole.finalize();
    sharded.finalize(nn::MasterShard{1, 2});
    whole.initialize(7);
    sharded.initialize(7);
    EXPECT_EQ(sharded.f32_copy().numel(), fp32_embedding ? 60 : 0);
    const std::vector<float> masters = floats(whole.params_flat());
    Tensor tokens = Tensor::empty({1, 4}, DType::i64);
    for (int64_t n = 0; n < 4; ++n) tokens.data<int64_t>()[n] = ids[n];
    nn::Activations saved;
    const std::vector<float> got = floats(e_sharded.forward(tokens, saved));
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t j = 0; j < 6; ++j) {
        const float master = masters[size_t(ids[n] * 6 + j)];
        ASSERT_EQ(got[size_t(n * 6 + j)], fp32_embedding ? master : float(bf16(master))) << n << ", " << j;
      }
    EXPECT_EQ(got, floats(e_whole.forward(tokens, saved)));
  }
}

}  // namespace
}  // namespace tessel
