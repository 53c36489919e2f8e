// Initialisation is a function of (seed, parameter name, global element index) only: a tensor- or
// pipeline-parallel shard draws exactly the values of the unsharded model (DESIGN.md section 3).
#include <gtest/gtest.h>

#include <cmath>

#include "support/host_access.h"
#include "tessel/nn/model.h"

using namespace tessel;

namespace {

nn::ModelConfig cfg(const std::string& arch) {
  nn::ModelConfig c;
  c.arch = arch;
  c.num_layers = 3;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.num_query_groups = 2;
  c.ffn_hidden_size = 96;
  c.vocab_size = 50;
  c.seq_length = 8;
  return c;
}

TEST(Init, ShardsDrawTheUnshardedValues) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  nn::Model model(cfg("llama"));
  model.params().initialize(42);
  for (const auto& spec : model.params().specs()) {
    if (spec.shape.size() != 2) continue;
    const Tensor full = model.params().param(spec.name);
    const int64_t R = spec.shape[0], C = spec.shape[1];
    // Column-parallel shard (rows of W) and row-parallel shard (columns of W), each half of 2-way TP.
    for (int part = 0; part < 2; ++part) {
      std::vector<float> rows(size_t(R / 2 * C)), cols(size_t(R * (C / 2)));
      nn::init_param_slice(spec, 42, part * (R / 2), R / 2, 0, C, rows.data());
      nn::init_param_slice(spec, 42, 0, R, part * (C / 2), C / 2, cols.data());
      for (int64_t r = 0; r < R / 2; ++r)
        for (int64_t c = 0; c < C; ++c)
          ASSERT_EQ(rows[size_t(r * C + c)], full.data<float>()[(part * (R / 2) + r) * C + c]) << spec.name;
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < C / 2; ++c)
          ASSERT_EQ(cols[size_t(r * (C / 2) + c)], full.data<float>()[r * C + part * (C / 2) + c]) << spec.name;
    }
  }
}

TEST(Init, SameSeedSameModelAcrossComputeDtypes) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  auto c = cfg("gpt2");
  nn::Model a(c);
  c.compute = DType::bf16;
  nn::Model b(c);
  a.params().initialize(7);
  b.params().initialize(7);
  ASSERT_EQ(a.params().numel(), b.params().numel());
  for (int64_t i = 0; i < a.params().numel(); ++i) ASSERT_EQ(a.params().params_data()[i], b.params().params_data()[i]);
  nn::Model other(cfg("gpt2"));
  other.params().initialize(8);
  EXPECT_NE(other.params().params_data()[0], a.params().params_data()[0]);
}

TEST(Init, DistributionsFollowTheConfig) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  const auto c = cfg("gpt2");
  nn::Model model(c);
  model.params().initialize(3);
  for (const auto& spec : model.params().specs()) {
    const Tensor t = model.params().param(spec.name);
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < t.numel(); ++i) {
      sum += t.data<float>()[i];
      sq += double(t.data<float>()[i]) * t.data<float>()[i];
    }
    const double mean = sum / double(t.numel()), std = std::sqrt(sq / double(t.numel()) - mean * mean);
    const bool is_bias = spec.name.find(".bias") != std::string::npos;
    const bool is_norm = spec.name.find("norm") != std::string::npos;
    if (is_norm && !is_bias) {
      EXPECT_EQ(mean, 1.0) << spec.name;
      EXPECT_FALSE(spec.weight_decay) << spec.name;
    } else if (is_bias) {
      EXPECT_EQ(std, 0.0) << spec.name;
      EXPECT_FALSE(spec.weight_decay) << spec.name;
    } else {
      const bool output_proj = spec.name.find("o_proj") != std::string::npos || spec.name.find("down_proj") != std::string::npos;
      const double want = output_proj ? 0.02 / std::sqrt(2.0 * double(c.num_layers)) : 0.02;
      EXPECT_NEAR(std, want, 0.1 * want) << spec.name;
      EXPECT_NEAR(mean, 0.0, 0.1 * want) << spec.name;
      EXPECT_TRUE(spec.weight_decay) << spec.name;
    }
  }
}

TEST(Init, FusedQkvIsTheConcatenationOfItsParts) {
  const auto c = cfg("llama");
  nn::Model model(c);
  model.params().initialize(5);
  const auto& q = model.params().spec("model.layers.1.self_attn.q_proj.weight");
  const auto& k = model.params().spec("model.layers.1.self_attn.k_proj.weight");
  const auto& v = model.params().spec("model.layers.1.self_attn.v_proj.weight");
  EXPECT_EQ(k.offset, q.offset + q.numel);
  EXPECT_EQ(v.offset, k.offset + k.numel);
}

TEST(Init, Bf16ComputeCopyIsTheRoundedMaster) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  auto c = cfg("llama");
  c.compute = DType::bf16;
  nn::Model model(c);
  model.params().initialize(9);
  const auto& s = model.params().spec("lm_head.weight");
  const Tensor copy = model.params().compute_at(s.offset, s.shape);
  const Tensor master = model.params().param("lm_head.weight");
  for (int64_t i = 0; i < master.numel(); ++i)
    ASSERT_EQ(copy.data<bf16>()[i].bits, bf16(master.data<float>()[i]).bits);
}

}  // namespace
