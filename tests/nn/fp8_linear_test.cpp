// FP8 Linear: forward, dgrad and wgrad against a float64 GEMM of the dequantised operands (what an
// FP8 tensor core with fp32 accumulation computes), and against the unquantised fp32 Linear within
// what the formats allow. Delayed scaling's history and scales are checked step by step.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "support/host_access.h"
#include "tessel/core/rng.h"
#include "tessel/kernels/fp8.h"
#include "tessel/nn/fp8.h"
#include "tessel/nn/linear.h"

using namespace tessel;

namespace {

constexpr int64_t N = 160, In = 256, Out = 192;  // partial 128-tiles along N and Out

Tensor random(int64_t r, int64_t c, uint64_t stream, float scale) {
  Tensor t = Tensor::empty({r, c}, DType::f32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = scale * philox_normal(11, stream, uint64_t(i));
  return t;
}

// The value an operand element stands for after quantisation with the recipe's granularity, in
// double: per tensor with scale s, per 1 x 128 row tile, or per 128 x 128 block (power-of-two scales).
std::vector<double> dequantised(const Tensor& x, nn::Fp8Recipe::Kind kind, DType fmt, float s, bool weight) {
  const int64_t R = x.size(0), C = x.size(1), t = kernels::kFp8Tile;
  std::vector<double> out(static_cast<size_t>(R * C));
  const float* p = x.data<float>();
  // amax of each element's tile (a row's 128 columns) or block (128 x 128 for weights)
  const int64_t tr = weight ? t : 1, nr = (R + tr - 1) / tr, nc = (C + t - 1) / t;
  std::vector<float> tile_amax(static_cast<size_t>(nr * nc), 0.0f);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      float& a = tile_amax[size_t((r / tr) * nc + c / t)];
      a = std::max(a, std::fabs(p[r * C + c]));
    }
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      float scale = s;
      if (kind == nn::Fp8Recipe::Kind::block)
        scale = kernels::fp8_scale_for(tile_amax[size_t((r / tr) * nc + c / t)], fmt, 0, true);
      out[size_t(r * C + c)] = double(kernels::fp8_decode(kernels::fp8_encode(p[r * C + c] * scale, fmt), fmt)) / scale;
    }
  return out;
}

Tensor transpose(const Tensor& x) {
  Tensor t = Tensor::empty({x.size(1), x.size(0)}, DType::f32);
  for (int64_t i = 0; i < x.size(0); ++i)
    for (int64_t j = 0; j < x.size(1); ++j) t.data<float>()[j * x.size(0) + i] = x.data<float>()[i * x.size(1) + j];
  return t;
}

// c[M, K'] = a[M, K] @ b[K', K]^T in double.
std::vector<double> gemm_nt(const std::vector<double>& a, const std::vector<double>& b, int64_t M, int64_t Nn, int64_t K) {
  std::vector<double> c(static_cast<size_t>(M * Nn), 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < Nn; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += a[size_t(i * K + k)] * b[size_t(j * K + k)];
      c[size_t(i * Nn + j)] = s;
    }
  return c;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

void expect_close(const Tensor& got, const std::vector<double>& want, double tol, const char* what) {
  const double scale = max_abs(want);
  double worst = 0;
  for (int64_t i = 0; i < got.numel(); ++i)
    worst = std::max(worst, std::fabs(double(got.data<float>()[i]) - want[size_t(i)]) / scale);
  EXPECT_LT(worst, tol) << what;
}

double rel_frobenius(const Tensor& got, const Tensor& want) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double d = double(got.data<float>()[i]) - double(want.data<float>()[i]);
    num += d * d;
    den += double(want.data<float>()[i]) * double(want.data<float>()[i]);
  }
  return std::sqrt(num / den);
}

struct Case {
  const char* recipe;
  const char* format;
};

class Fp8LinearTest : public ::testing::TestWithParam<Case> {};

TEST_P(Fp8LinearTest, GemmsComputeWhatFp8TensorCoresComputeAndStayNearFp32) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  const nn::Fp8Recipe recipe = nn::Fp8Recipe::parse(GetParam().recipe, GetParam().format, 4, "max", 0, false);
  nn::Fp8State state(recipe);
  nn::ParamStore ps(DType::f32), ref_ps(DType::f32);
  ps.set_fp8(&state);
  nn::Linear lin(ps, {{"l", Out}}, In, true, 0.05f);
  nn::Linear ref(ref_ps, {{"l", Out}}, In, true, 0.05f);
  ps.finalize();
  ref_ps.finalize();
  ps.initialize(5);
  ref_ps.initialize(5);
  for (int64_t j = 0; j < Out; ++j) ps.param("l.bias").data<float>()[j] = ref_ps.param("l.bias").data<float>()[j] = 0.01f * float(j);
  const Tensor x = random(N, In, 1, 3.0f), dy = random(N, Out, 2, 0.001f);
  const Tensor w = ps.param("l.weight");

  // Delayed scaling starts from scale 1; one step records the amaxes and sets the scales to use.
  const int steps = recipe.kind == nn::Fp8Recipe::Kind::delayed ? 2 : 1;
  Tensor y, dx;
  for (int s = 0; s < steps; ++s) {
    ps.zero_grads();
    nn::Activations saved;
    y = lin.forward(x, saved);
    dx = lin.backward_input(dy, saved);
    lin.backward_weight(saved);
    if (s + 1 < steps) {
      state.end_step({});
      // slots 0, 1, 2: x, w, dy; the scale maps the step's amax to the format's max
      EXPECT_FLOAT_EQ(state.history(0)[0], kernels::amax(x.numel(), x.data<float>()));
      EXPECT_FLOAT_EQ(state.scale(0), 448.0f / kernels::amax(x.numel(), x.data<float>()));
      EXPECT_FLOAT_EQ(state.scale(2), kernels::fp8_max(recipe.backward) / kernels::amax(dy.numel(), dy.data<float>()));
    }
  }
  // The scales each operand was quantised with (per-tensor recipes).
  auto scale_of = [&](const Tensor& t, int slot, DType fmt) {
    return recipe.kind == nn::Fp8Recipe::Kind::delayed ? state.scale(slot)
                                                        : kernels::fp8_scale_for(kernels::amax(t.numel(), t.data<float>()), fmt, 0, false);
  };
  const auto xd = dequantised(x, recipe.kind, recipe.forward, scale_of(x, 0, recipe.forward), false);
  const auto wd = dequantised(w, recipe.kind, recipe.forward, scale_of(w, 1, recipe.forward), true);
  const auto dyd = dequantised(dy, recipe.kind, recipe.backward, scale_of(dy, 2, recipe.backward), false);
  // wgrad contracts over the tokens: block scaling quantises x and dy in 128-token tiles (transposed).
  const Tensor xt = transpose(x), dyt = transpose(dy);
  const auto xtd = dequantised(xt, recipe.kind, recipe.forward, scale_of(x, 0, recipe.forward), false);
  const auto dytd = dequantised(dyt, recipe.kind, recipe.backward, scale_of(dy, 2, recipe.backward), false);

  auto want_y = gemm_nt(xd, wd, N, Out, In);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < Out; ++j) want_y[size_t(i * Out + j)] += 0.01 * double(j);
  expect_close(y, want_y, 1e-5, "forward");
  const Tensor wt = transpose(w);
  const auto wtd = dequantised(wt, recipe.kind, recipe.forward, scale_of(w, 1, recipe.forward), true);
  expect_close(dx, gemm_nt(dyd, wtd, N, In, Out), 1e-5, "dgrad");
  expect_close(ps.grad("l.weight"), gemm_nt(dytd, xtd, Out, In, N), 1e-5, "wgrad");
  // The bias gradient comes from the unquantised dy.
  for (int64_t j = 0; j < Out; ++j) {
    double s = 0;
    for (int64_t i = 0; i < N; ++i) s += double(dy.data<float>()[i * Out + j]);
    EXPECT_NEAR(ps.grad("l.bias").data<float>()[j], s, 1e-6);
  }

  // Against fp32: relative Frobenius error of the order of the formats' half-ulp (2^-4 e4m3, 2^-3 e5m2).
  nn::Activations saved;
  const Tensor y32 = ref.forward(x, saved);
  const Tensor dx32 = ref.backward_input(dy, saved);
  ref.backward_weight(saved);
  const double tol_fwd = 0.05, tol_bwd = recipe.backward == DType::e5m2 ? 0.09 : 0.05;
  EXPECT_LT(rel_frobenius(y, y32), tol_fwd);
  EXPECT_LT(rel_frobenius(dx, dx32), tol_bwd);
  EXPECT_LT(rel_frobenius(ps.grad("l.weight"), ref_ps.grad("l.weight")), tol_bwd);
}

INSTANTIATE_TEST_SUITE_P(Recipes, Fp8LinearTest,
                         ::testing::Values(Case{"current", "hybrid"}, Case{"current", "e4m3"}, Case{"delayed", "hybrid"},
                                           Case{"block", "e4m3"}, Case{"block", "hybrid"}),
                         [](const auto& info) { return std::string(info.param.recipe) + "_" + info.param.format; });

TEST(Fp8State, DelayedHistoryWindowAndMostRecent) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  for (const char* algo : {"max", "most_recent"}) {
    nn::Fp8State st(nn::Fp8Recipe::parse("delayed", "hybrid", 3, algo, 1, false));
    const int slot = st.add("t.x", DType::e4m3);
    const float amaxes[] = {8.0f, 2.0f, 4.0f, 1.0f};
    for (float a : amaxes) {
      Tensor t = Tensor::empty({1, 2}, DType::f32);
      t.data<float>()[0] = a;
      t.data<float>()[1] = -a / 2;
      st.quantize_rows(t, slot, DType::e4m3);
      st.end_step({});
    }
    // history [1, 4, 2]: the window of 3 has dropped the 8
    EXPECT_EQ(st.history(slot), (std::vector<float>{1.0f, 4.0f, 2.0f}));
    const float a = std::string(algo) == "max" ? 4.0f : 1.0f;
    EXPECT_FLOAT_EQ(st.scale(slot), 448.0f / a / 2.0f) << algo;  // margin 1
    const auto saved = st.state_tensors();
    nn::Fp8State fresh(nn::Fp8Recipe::parse("delayed", "hybrid", 3, algo, 1, false));
    fresh.add("t.x", DType::e4m3);
    ASSERT_TRUE(fresh.load_state(saved));
    EXPECT_EQ(fresh.history(0), st.history(0));
    EXPECT_EQ(fresh.scale(0), st.scale(0));
  }
}

// Evaluation (Fp8State::Evaluation) records nothing into the step, weights included. A Linear that
// the evaluation runs and the step's training does not (a routed expert without tokens) leaves the
// histories as they are without the evaluation; one that training runs after the evaluation records
// its weight's amax then, though it reuses the weight the evaluation quantised. The reference is the
// same sequence without the evaluation.
TEST(Fp8Evaluation, LeavesTheHistoriesAsTheyAreWithoutIt) {
  const tessel::testing::HostAccess host;
  for (const bool trained_after : {false, true}) {
    std::vector<std::pair<std::string, Tensor>> state_of[2];
    Tensor y_of[2];
    for (const int evaluate : {0, 1}) {
      nn::Fp8State state(nn::Fp8Recipe::parse("delayed", "hybrid", 4, "max", 0, false));
      nn::ParamStore ps(DType::f32);
      ps.set_fp8(&state);
      nn::Linear lin(ps, {{"l", Out}}, In, false, 0.05f);
      ps.finalize();
      ps.initialize(5);
      const Tensor x = random(N, In, 1, 3.0f);
      {
        nn::Activations saved;
        lin.forward(x, saved);  // step 1, trained
      }
      state.end_step({});
      ps.mark_updated();  // an optimizer step: the weight is quantised anew at its next use
      if (evaluate) {
        const nn::Fp8State::Evaluation evaluating(&state);
        nn::Activations dropped;
        lin.forward(random(N, In, 3, 5.0f), dropped);
      }
      if (trained_after) {
        nn::Activations saved;
        y_of[evaluate] = lin.forward(x, saved);
      }
      state.end_step({});
      state_of[evaluate] = state.state_tensors();
    }
    ASSERT_EQ(state_of[0].size(), state_of[1].size());
    for (size_t i = 0; i < state_of[0].size(); ++i) {
      const Tensor& a = state_of[0][i].second;
      const Tensor& b = state_of[1][i].second;
      ASSERT_EQ(state_of[0][i].first, state_of[1][i].first);
      ASSERT_EQ(a.numel(), b.numel());
      for (int64_t k = 0; k < a.numel(); ++k)
        EXPECT_EQ(a.data<float>()[k], b.data<float>()[k])
            << state_of[0][i].first << "[" << k << "], trained after the evaluation: " << trained_after;
    }
    if (trained_after) {
      for (int64_t k = 0; k < y_of[0].numel(); ++k) ASSERT_EQ(y_of[0].data<float>()[k], y_of[1].data<float>()[k]) << k;
    }
  }
}

}  // namespace
