// SwiGLU and GeLU (tanh approximation) forward/backward against double references (libm exp/tanh), and
// the backward against central finite differences of the kernel's own fp32 forward.
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "kernels/reference.h"
#include "tessel/kernels/act.h"

namespace tessel {
namespace {

using testref::Rand;
using testref::sz;
using testref::Tol;

enum class Dt { f32, bf16 };

// Pre-activations: mostly N(0, 3^2), plus values far in both tails (beyond fp32 exp's range for the
// sigmoid's exp(-x)) and exact zeros.
std::vector<float> preacts(size_t n, Rand& rng) {
  std::vector<float> x = rng.normals(n, 3.0);
  const float extremes[] = {0.0f, -0.0f, 20.0f, -20.0f, 95.0f, -95.0f, 1e-4f, -1e-4f, 6.5f, -6.5f};
  for (size_t i = 0; i < n; i += 7) x[i] = extremes[(i / 7) % std::size(extremes)];
  return x;
}

// ---------------------------------------------------------------------------------------------------
class SwigluTest : public ::testing::TestWithParam<std::tuple<Dt, int64_t, int64_t>> {};

template <class T>
void check_swiglu(int64_t N, int64_t F) {
  Rand rng(uint64_t(N * 1000 + F));
  const std::vector<float> gu = preacts(sz(N * 2 * F), rng);
  const std::vector<float> dout = rng.normals(sz(N * F));
  std::vector<T> out(sz(N * F)), dgu(sz(N * 2 * F));
  kernels::swiglu_fwd<T>(N, F, gu.data(), out.data());
  kernels::swiglu_bwd<T>(N, F, gu.data(), dout.data(), dgu.data());

  std::vector<double> rout(sz(N * F)), rdgu(sz(N * 2 * F));
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < F; ++j) {
      const double g = gu[sz(i * 2 * F + j)], u = gu[sz(i * 2 * F + F + j)], d = dout[sz(i * F + j)];
      rout[sz(i * F + j)] = testref::silu(g) * u;
      rdgu[sz(i * 2 * F + j)] = d * u * testref::silu_grad(g);
      rdgu[sz(i * 2 * F + F + j)] = d * testref::silu(g);
    }
  EXPECT_TRUE(testref::all_close(testref::to_double(out), rout, Tol<T>::rel, "out"));
  EXPECT_TRUE(testref::all_close(testref::to_double(dgu), rdgu, Tol<T>::rel, "dgu"));

  if constexpr (std::is_same_v<T, float>) {
    // Each output depends only on its own (gate, up) pair, so shifting every input at once gives all
    // partial derivatives in two forward calls.
    std::vector<double> fd(sz(N * 2 * F));
    for (int which = 0; which < 2; ++which) {  // 0: gate, 1: up
      std::vector<float> gp = gu, gm = gu;
      std::vector<double> step(sz(N * F));
      for (int64_t i = 0; i < N; ++i)
        for (int64_t j = 0; j < F; ++j) {
          const size_t c = sz(i * 2 * F + which * F + j);
          const float h = float(testref::kFiniteDiffH * std::max(1.0, std::fabs(double(gu[c]))));
          gp[c] = gu[c] + h;
          gm[c] = gu[c] - h;
          step[sz(i * F + j)] = double(gp[c]) - double(gm[c]);
        }
      std::vector<float> op(sz(N * F)), om(sz(N * F));
      kernels::swiglu_fwd<float>(N, F, gp.data(), op.data());
      kernels::swiglu_fwd<float>(N, F, gm.data(), om.data());
      for (int64_t i = 0; i < N; ++i)
        for (int64_t j = 0; j < F; ++j) {
          const size_t o = sz(i * F + j);
          fd[sz(i * 2 * F + which * F + j)] = double(dout[o]) * (double(op[o]) - double(om[o])) / step[o];
        }
    }
    EXPECT_TRUE(testref::all_close(testref::to_double(dgu), fd, testref::kFiniteDiffRel, "dgu vs FD"));
  }
}

TEST_P(SwigluTest, ForwardBackward) {
  const auto [dt, N, F] = GetParam();
  if (dt == Dt::f32)
    check_swiglu<float>(N, F);
  else
    check_swiglu<bf16>(N, F);
}

std::string swiglu_name(const ::testing::TestParamInfo<SwigluTest::ParamType>& info) {
  const auto& [dt, N, F] = info.param;
  return std::string(dt == Dt::f32 ? "f32" : "bf16") + "_N" + std::to_string(N) + "_F" + std::to_string(F);
}
INSTANTIATE_TEST_SUITE_P(Grid, SwigluTest,
                         ::testing::Combine(::testing::Values(Dt::f32, Dt::bf16), ::testing::Values<int64_t>(1, 3, 17),
                                            ::testing::Values<int64_t>(1, 3, 17, 63, 64, 65, 130)),
                         swiglu_name);

// ---------------------------------------------------------------------------------------------------
class GeluTest : public ::testing::TestWithParam<std::tuple<Dt, int64_t>> {};

template <class T>
void check_gelu(int64_t n) {
  Rand rng(uint64_t(n) + 17);
  const std::vector<float> x = preacts(sz(n), rng);
  const std::vector<float> dout = rng.normals(sz(n));
  std::vector<T> out(sz(n)), dx(sz(n));
  kernels::gelu_fwd<T>(n, x.data(), out.data());
  kernels::gelu_bwd<T>(n, x.data(), dout.data(), dx.data());
  std::vector<double> rout(sz(n)), rdx(sz(n));
  for (size_t i = 0; i < sz(n); ++i) {
    rout[i] = testref::gelu_tanh(x[i]);
    rdx[i] = double(dout[i]) * testref::gelu_tanh_grad(x[i]);
  }
  EXPECT_TRUE(testref::all_close(testref::to_double(out), rout, Tol<T>::rel, "out"));
  EXPECT_TRUE(testref::all_close(testref::to_double(dx), rdx, Tol<T>::rel, "dx"));
  // The far tails are ~x and ~0; check the bulk relative to its own scale too, so an error confined to
  // |x| < 3 is not hidden behind the magnitude of the tails.
  std::vector<double> bulk_got, bulk_ref;
  for (size_t i = 0; i < sz(n); ++i)
    if (std::fabs(x[i]) < 3) bulk_got.push_back(testref::to_d(out[i])), bulk_ref.push_back(rout[i]);
  EXPECT_TRUE(testref::all_close(bulk_got, bulk_ref, Tol<T>::rel, "out, |x| < 3"));

  if constexpr (std::is_same_v<T, float>) {
    std::vector<float> xp(sz(n)), xm(sz(n)), op(sz(n)), om(sz(n));
    for (size_t i = 0; i < sz(n); ++i) {
      const float h = float(testref::kFiniteDiffH * std::max(1.0, std::fabs(double(x[i]))));
      xp[i] = x[i] + h;
      xm[i] = x[i] - h;
    }
    kernels::gelu_fwd<float>(n, xp.data(), op.data());
    kernels::gelu_fwd<float>(n, xm.data(), om.data());
    std::vector<double> fd(sz(n));
    for (size_t i = 0; i < sz(n); ++i)
      fd[i] = double(dout[i]) * (double(op[i]) - double(om[i])) / (double(xp[i]) - double(xm[i]));
    EXPECT_TRUE(testref::all_close(testref::to_double(dx), fd, testref::kFiniteDiffRel, "dx vs FD"));
  }
}

TEST_P(GeluTest, ForwardBackward) {
  const auto [dt, n] = GetParam();
  if (dt == Dt::f32)
    check_gelu<float>(n);
  else
    check_gelu<bf16>(n);
}

std::string gelu_name(const ::testing::TestParamInfo<GeluTest::ParamType>& info) {
  const auto& [dt, n] = info.param;
  return std::string(dt == Dt::f32 ? "f32" : "bf16") + "_n" + std::to_string(n);
}
INSTANTIATE_TEST_SUITE_P(Grid, GeluTest,
                         ::testing::Combine(::testing::Values(Dt::f32, Dt::bf16),
                                            ::testing::Values<int64_t>(1, 3, 17, 63, 64, 65, 130, 1000, 4099)),
                         gelu_name);

// Known values of GPT-2's gelu_new (from the formula, checked to 1e-6): gelu(1) = 0.841192, gelu(-1) =
// -0.158808, gelu(0) = 0; and silu(1) = 0.731059.
TEST(Activations, KnownValues) {
  const float x[] = {1.0f, -1.0f, 0.0f};
  float y[3];
  kernels::gelu_fwd<float>(3, x, y);
  EXPECT_NEAR(y[0], 0.841192, 1e-6);
  EXPECT_NEAR(y[1], -0.158808, 1e-6);
  EXPECT_EQ(y[2], 0.0f);
  const float gu[] = {1.0f, 1.0f};
  float o;
  kernels::swiglu_fwd<float>(1, 1, gu, &o);
  EXPECT_NEAR(o, 0.731059, 1e-6);
}

}  // namespace
}  // namespace tessel
