// Incremental decoding with a KV cache gives the logits of the full forward pass at every position,
// and the sampler follows its options.
#include <gtest/gtest.h>

#include <cmath>

#include "support/host_access.h"
#include "tessel/infer/sampler.h"
#include "tessel/nn/model.h"

using namespace tessel;

namespace {

class Decode : public ::testing::TestWithParam<std::string> {};

TEST_P(Decode, KvCacheMatchesFullForward) {
  nn::ModelConfig c;
  c.arch = GetParam();
  c.num_layers = 2;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.num_query_groups = c.arch == "llama" ? 2 : 4;
  c.ffn_hidden_size = 48;
  c.vocab_size = 37;
  c.seq_length = 70;  // more than one attention tile
  nn::Model model(c);
  model.params().initialize(5);
  Tensor tokens = Tensor::empty({1, c.seq_length}, DType::i64);
  {
    const tessel::testing::HostAccess host;
    for (int64_t t = 0; t < c.seq_length; ++t) tokens.data<int64_t>()[t] = (t * 11 + 3) % c.vocab_size;
  }
  const Tensor full = model.logits(tokens);  // [T, V]
  nn::KVCache cache = model.make_kv_cache();
  int64_t pos = 0;
  for (int64_t chunk : {5, 1, 1, 20, 1, 42}) {  // a prompt, then single tokens and longer pieces
    Tensor piece = tokens.reshape({c.seq_length}).slice(0, pos, pos + chunk).clone();
    const Tensor last = model.decode(piece, cache);
    pos += chunk;
    double err = 0, scale = 0;
    const tessel::testing::HostAccess host;
    for (int64_t v = 0; v < c.vocab_size; ++v) {
      const double want = full.data<float>()[(pos - 1) * c.vocab_size + v];
      err = std::max(err, std::fabs(last.data<float>()[v] - want));
      scale = std::max(scale, std::fabs(want));
    }
    EXPECT_LT(err / scale, 1e-5) << "position " << pos - 1;
  }
  EXPECT_EQ(cache.length, c.seq_length);
  Tensor one = Tensor::zeros({1}, DType::i64);
  EXPECT_THROW(model.decode(one, cache), Error);  // the context is full
}

// A diverged model's logits are refused, naming the step, on the greedy and the sampling path (NaN
// would otherwise reach std::sort, whose ordering it breaks).
TEST(Sampler, NonFiniteLogitsAreRefusedNamingTheStep) {
  auto expect_error = [](std::vector<float> logits, double temperature, const std::string& text) {
    const infer::SamplingOptions o{temperature, 0, 1.0, 1};
    try {
      infer::sample_token(logits.data(), int64_t(logits.size()), o, 7);
      ADD_FAILURE() << "accepted; expected: " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  const float nan = std::nanf(""), inf = INFINITY;
  for (double temperature : {0.0, 0.8}) {
    expect_error({0.5f, nan, 1.0f}, temperature, "logits contain NaN at step 7 (token id 1)");
    expect_error({0.5f, 1.0f, inf}, temperature, "logits contain +inf at step 7 (token id 2)");
    expect_error({-inf, -inf}, temperature, "logits are all -inf at step 7");
  }
  // -inf alone is a token that cannot be drawn.
  const float masked[3] = {-inf, 0.0f, -inf};
  for (int s = 0; s < 20; ++s) EXPECT_EQ(infer::sample_token(masked, 3, {1.0, 0, 1.0, 3}, s), 1);
}

INSTANTIATE_TEST_SUITE_P(Archs, Decode, ::testing::Values("llama", "gpt2"));

TEST(Sampler, GreedyTopKTopPAndTheDistribution) {
  const float logits[4] = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  infer::SamplingOptions greedy{0.0, 0, 1.0, 1};
  EXPECT_EQ(infer::sample_token(logits, 4, greedy, 0), 0);
  infer::SamplingOptions k1{1.0, 1, 1.0, 1};
  infer::SamplingOptions p_small{1.0, 0, 0.1, 1};
  for (int s = 0; s < 50; ++s) {
    EXPECT_EQ(infer::sample_token(logits, 4, k1, s), 0);
    EXPECT_EQ(infer::sample_token(logits, 4, p_small, s), 0);
  }
  infer::SamplingOptions full{1.0, 0, 1.0, 7}, top2{1.0, 2, 1.0, 7}, nucleus{1.0, 0, 0.9, 7};
  std::vector<int> count(4, 0), count2(4, 0), count3(4, 0);
  const int n = 20000;
  for (int s = 0; s < n; ++s) {
    ++count[size_t(infer::sample_token(logits, 4, full, s))];
    ++count2[size_t(infer::sample_token(logits, 4, top2, s))];
    ++count3[size_t(infer::sample_token(logits, 4, nucleus, s))];
  }
  const double want[4] = {0.5, 0.3, 0.15, 0.05};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(double(count[size_t(i)]) / n, want[i], 0.015) << i;
  EXPECT_NEAR(double(count2[0]) / n, 0.5 / 0.8, 0.015);  // renormalised over the top 2
  EXPECT_EQ(count2[2] + count2[3], 0);
  EXPECT_EQ(count3[3], 0);  // 0.5 + 0.3 + 0.15 reaches 0.9 without the last token
  EXPECT_EQ(infer::sample_token(logits, 4, full, 123), infer::sample_token(logits, 4, full, 123));  // seeded
  EXPECT_THROW((infer::SamplingOptions{-1.0, 0, 1.0, 0}.validate()), Error);
  EXPECT_THROW((infer::SamplingOptions{1.0, 0, 0.0, 0}.validate()), Error);
}

}  // namespace
