// Whole models with FP8 Linears, the norms and MLP activations writing the Linear inputs as FP8
// (precision.fp8.fused_casts) against the same models quantising in the Linears instead. With fp32
// compute both quantise the same fp32 values, so losses, every gradient and the delayed-scaling
// scales must agree (up to summation order) over several optimizer steps; with bf16 compute the unfused path
// rounds to bf16 first, so the two differ by FP8 rounding of values a bf16 ulp apart: the losses
// stay close.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "support/host_access.h"
#include "tessel/core/rng.h"
#include "tessel/nn/model.h"
#include "tessel/optim/adamw.h"

using namespace tessel;

namespace {

struct Case {
  std::string arch;
  nn::Fp8Recipe::Kind recipe;
  DType compute;
};

nn::ModelConfig config(const Case& c, bool fused) {
  nn::ModelConfig m;
  m.arch = c.arch;
  m.num_layers = 2;
  m.hidden_size = 256;  // two 128-wide tiles along the norms' rows
  m.num_attention_heads = 4;
  m.num_query_groups = c.arch == "llama" ? 2 : 4;
  m.ffn_hidden_size = 320;  // a partial tile along the activation's rows
  m.vocab_size = 101;
  m.seq_length = 100;  // 2 x 100 tokens: a partial 128-row block for the column tiles
  m.compute = c.compute;
  m.fp8 = nn::Fp8Recipe::parse(c.recipe == nn::Fp8Recipe::Kind::block ? "block" : "delayed", "hybrid", 16, "max", 0,
                               false);
  m.fp8.fused_casts = fused;
  return m;
}

Tensor tokens(int64_t B, int64_t T, int64_t V, int64_t a, int64_t b) {
  Tensor t = Tensor::empty({B, T}, DType::i64);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int64_t>()[i] = (i * a + b + i * i / 7) % V;
  return t;
}

class Fp8FusedModel : public ::testing::TestWithParam<Case> {};

TEST_P(Fp8FusedModel, FusedCastsTrainLikeQuantisingInTheLinear) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  const Case& c = GetParam();
  nn::Model fused(config(c, true)), plain(config(c, false));
  ASSERT_EQ(fused.params().numel(), plain.params().numel());
  for (nn::Model* m : {&fused, &plain}) {  // same weights, with a std large enough to matter at this width
    for (int64_t i = 0; i < m->params().numel(); ++i) m->params().params_data()[i] = 0.05f * philox_normal(3, 1, uint64_t(i));
    m->params().refresh_compute_copy();
  }
  const Tensor x = tokens(2, 100, 101, 5, 3), y = tokens(2, 100, 101, 7, 1);
  optim::AdamWConfig oc;
  optim::AdamW opt_f(fused.params(), oc), opt_p(plain.params(), oc);
  double worst_loss = 0, worst_grad = 0;
  for (int step = 0; step < 4; ++step) {
    fused.params().zero_grads();
    plain.params().zero_grads();
    const double lf = fused.forward_backward(x, y, 1.0f / 200.0f), lp = plain.forward_backward(x, y, 1.0f / 200.0f);
    worst_loss = std::max(worst_loss, std::fabs(lf - lp) / std::fabs(lp));
    if (c.compute == DType::f32) {
      const float* gf = fused.params().grads_data();
      const float* gp = plain.params().grads_data();
      double num = 0, den = 0;
      for (int64_t i = 0; i < plain.params().numel(); ++i) {
        num += double(gf[i] - gp[i]) * double(gf[i] - gp[i]);
        den += double(gp[i]) * double(gp[i]);
      }
      worst_grad = std::max(worst_grad, std::sqrt(num / den));
    }
    opt_f.step(1e-3);
    opt_p.step(1e-3);
    fused.fp8_state()->end_step({});
    plain.fp8_state()->end_step({});
  }
  if (c.compute == DType::f32) {
    // Same codes, same scales: only the order of fp32 sums may differ.
    EXPECT_LT(worst_loss, 1e-6);
    EXPECT_LT(worst_grad, 1e-5);
    // Every slot's delayed scale (the fused producers' amaxes fed them), the Linears' inputs included.
    const auto a = fused.fp8_state()->state_tensors(), b = plain.fp8_state()->state_tensors();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      for (int64_t j = 0; j < a[i].second.numel(); ++j)
        ASSERT_EQ(a[i].second.data<float>()[j], b[i].second.data<float>()[j]) << a[i].first << "[" << j << "]";
  } else {
    // FP8 rounding of bf16-rounded against fp32 values: close, and not equal (the fused path ran).
    EXPECT_LT(worst_loss, 2e-3);
    EXPECT_GT(worst_loss, 0.0);
  }
  std::printf("[ measured ] worst relative loss difference %.2e, gradient (L2) %.2e\n", worst_loss, worst_grad);
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.arch + (info.param.recipe == nn::Fp8Recipe::Kind::block ? "_block" : "_delayed") +
         (info.param.compute == DType::f32 ? "_fp32" : "_bf16");
}

INSTANTIATE_TEST_SUITE_P(Recipes, Fp8FusedModel,
                         ::testing::Values(Case{"llama", nn::Fp8Recipe::Kind::delayed, DType::f32},
                                           Case{"llama", nn::Fp8Recipe::Kind::block, DType::f32},
                                           Case{"gpt2", nn::Fp8Recipe::Kind::delayed, DType::f32},
                                           Case{"gpt2", nn::Fp8Recipe::Kind::block, DType::f32},
                                           Case{"llama", nn::Fp8Recipe::Kind::block, DType::bf16},
                                           Case{"llama", nn::Fp8Recipe::Kind::delayed, DType::bf16}),
                         case_name);

}  // namespace
