// AdamW against a double-precision re-implementation of torch.optim.AdamW's single-tensor step:
//   param.mul_(1 - lr * wd); exp_avg.lerp_(grad, 1 - beta1);
//   exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value = 1 - beta2);
//   step_size = lr / (1 - beta1^t); denom = exp_avg_sq.sqrt() / sqrt(1 - beta2^t) + eps;
//   param.addcdiv_(exp_avg, denom, value = -step_size)
// over several steps, with and without weight decay. Plus sum_squares.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "kernels/reference.h"
#include "tessel/kernels/adamw.h"

namespace tessel {
namespace {

using testref::Rand;
using testref::sz;
using testref::Tol;

struct TorchAdamW {
  double lr, beta1, beta2, eps, wd;
  void step(int64_t t, std::vector<double>& p, std::vector<double>& m, std::vector<double>& v,
            const std::vector<float>& g) const {
    const double bc1 = 1.0 - std::pow(beta1, double(t)), bc2 = 1.0 - std::pow(beta2, double(t));
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] *= 1.0 - lr * wd;
      m[i] += (double(g[i]) - m[i]) * (1.0 - beta1);  // lerp
      v[i] = v[i] * beta2 + (1.0 - beta2) * double(g[i]) * double(g[i]);
      const double denom = std::sqrt(v[i]) / std::sqrt(bc2) + eps;
      p[i] += -(lr / bc1) * m[i] / denom;
    }
  }
};

// Gradients spanning magnitudes, including ~eps (where the eps placement matters) and exact zeros.
std::vector<float> gradients(size_t n, Rand& rng) {
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) {
    g[i] = float(rng.normal() * std::pow(10.0, rng.uniform(-3, 1)));
    if (i % 13 == 4) g[i] = float(rng.normal() * 1e-8);
    if (i % 17 == 9) g[i] = 0.0f;
  }
  return g;
}

// (n, weight decay)
class AdamWTest : public ::testing::TestWithParam<std::tuple<int64_t, float>> {};

TEST_P(AdamWTest, MatchesTorchFormulaOverSteps) {
  const auto [n, wd] = GetParam();
  Rand rng(uint64_t(n) * 3 + (wd > 0));
  const TorchAdamW ref{1e-2, 0.9, 0.95, 1e-8, double(wd)};
  std::vector<float> p = rng.normals(sz(n), 0.1), m(sz(n), 0.0f), v(sz(n), 0.0f);
  std::vector<double> rp = testref::to_double(p), rm(sz(n), 0.0), rv(sz(n), 0.0);
  for (int64_t t = 1; t <= 6; ++t) {
    SCOPED_TRACE(::testing::Message() << "step " << t);
    const std::vector<float> g = gradients(sz(n), rng);
    // One step from the kernel's own current state, in double: checks this step's formula tightly
    // (the update p_new - p_old is compared relative to its own size, not to |p|).
    std::vector<double> sp = testref::to_double(p), sm = testref::to_double(m), sv = testref::to_double(v);
    const std::vector<double> p_before = sp;
    ref.step(t, sp, sm, sv, g);
    // The independent trajectory, all in double from the start.
    ref.step(t, rp, rm, rv, g);

    const std::vector<float> pk_before = p;
    kernels::adamw_update(n, p.data(), g.data(), m.data(), v.data(),
                          {float(ref.lr), float(ref.beta1), float(ref.beta2), float(ref.eps), wd, t});
    std::vector<double> upd(sz(n)), rupd(sz(n));
    for (size_t i = 0; i < sz(n); ++i) {
      upd[i] = double(p[i]) - double(pk_before[i]);
      rupd[i] = sp[i] - p_before[i];
    }
    // The update is ~lr = 1e-2 and p ~0.1: rounding p_new to fp32 costs ~6e-9, 1e-6 of the update.
    EXPECT_TRUE(testref::all_close(upd, rupd, Tol<float>::rel, "update p_new - p_old"));
    EXPECT_TRUE(testref::all_close(testref::to_double(m), sm, Tol<float>::rel, "m (one step)"));
    EXPECT_TRUE(testref::all_close(testref::to_double(v), sv, Tol<float>::rel, "v (one step)"));
    EXPECT_TRUE(testref::all_close(testref::to_double(p), rp, Tol<float>::rel, "p (trajectory)"));
    EXPECT_TRUE(testref::all_close(testref::to_double(m), rm, Tol<float>::rel, "m (trajectory)"));
    EXPECT_TRUE(testref::all_close(testref::to_double(v), rv, Tol<float>::rel, "v (trajectory)"));
  }
}

std::string adamw_name(const ::testing::TestParamInfo<AdamWTest::ParamType>& info) {
  const auto& [n, wd] = info.param;
  std::string name = "n";  // (built by appending: GCC 12 warns -Wrestrict on "n" + std::to_string(n))
  name += std::to_string(n);
  name += wd > 0 ? "_wd" : "_nowd";
  return name;
}
INSTANTIATE_TEST_SUITE_P(Grid, AdamWTest,
                         ::testing::Combine(::testing::Values<int64_t>(1, 3, 17, 64, 65, 1000, 100003),
                                            ::testing::Values(0.0f, 0.1f)),
                         adamw_name);

// First step with zero state: m_hat = g, v_hat = g^2, so p moves by lr * g / (|g| + eps) (~lr sign(g)),
// plus the decoupled decay lr * wd * p.
TEST(AdamW, FirstStepIsSignedLr) {
  std::vector<float> p = {1.0f, -2.0f, 0.5f, 0.0f}, g = {3.0f, -0.25f, 1e-3f, 7.0f}, m(4, 0.0f), v(4, 0.0f);
  kernels::adamw_update(4, p.data(), g.data(), m.data(), v.data(), {0.1f, 0.9f, 0.999f, 1e-8f, 0.5f, 1});
  const double want[] = {1.0 * 0.95 - 0.1 * 3 / (3 + 1e-8), -2.0 * 0.95 + 0.1 * 0.25 / (0.25 + 1e-8),
                         0.5 * 0.95 - 0.1 * 1e-3 / (1e-3 + 1e-8), -0.1 * 7 / (7 + 1e-8)};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(p[i], want[i], 2e-6) << i;
  // The hyperparameters are fp32: 1 - beta2 is 1 - float(0.999) (exact by Sterbenz), 1.3e-5 below 1e-3.
  EXPECT_NEAR(m[0], 3.0 * (1.0 - double(0.9f)), 1e-8);
  EXPECT_NEAR(v[0], 9.0 * (1.0 - double(0.999f)), 1e-9);
}

// With a bf16 compute copy (bf16 runs): the fp32 update is the one without a copy, bit for bit, and
// the copy is each updated master rounded to nearest even (bf16's own conversion, dtype.h), on
// sizes around the kernel's blocks of 2,048 and with a NaN master (the copy stays NaN).
TEST(AdamW, TheBf16CopyIsTheUpdatedMasterRoundedToNearestEven) {
  for (int64_t n : {1, 2047, 2048, 2049, 100003}) {
    SCOPED_TRACE(n);
    Rand rng{uint64_t(n) + 7};
    std::vector<float> p = rng.normals(sz(n), 0.1), m = rng.normals(sz(n), 1e-2), v(sz(n));
    for (float& e : v) e = float(rng.uniform(0, 1e-3));
    if (n > 2048) p[2048] = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> g = gradients(sz(n), rng);
    std::vector<float> p2 = p, m2 = m, v2 = v;
    std::vector<bf16> copy(sz(n));
    const kernels::AdamWHyper h{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 3};
    kernels::adamw_update(n, p.data(), g.data(), m.data(), v.data(), h);
    kernels::adamw_update(n, p2.data(), g.data(), m2.data(), v2.data(), h, 1.0f, copy.data());
    int64_t differ = 0;
    for (size_t i = 0; i < sz(n); ++i) {
      differ += f32_bits(p[i]) != f32_bits(p2[i]) || f32_bits(m[i]) != f32_bits(m2[i]) ||
                f32_bits(v[i]) != f32_bits(v2[i]) || copy[i].bits != bf16(p2[i]).bits;
    }
    EXPECT_EQ(differ, 0) << "elements whose update or bf16 copy differ";
    if (n > 2048) {
      EXPECT_TRUE(std::isnan(float(copy[2048])));
    }
  }
}

TEST(AdamW, SumSquares) {
  for (int64_t n : {0, 1, 17, 1023, 1024, 1025, 4097, 100003}) {
    SCOPED_TRACE(n);
    Rand rng{uint64_t(n)};
    std::vector<float> x = rng.normals(sz(n), 3.0);
    double ref = 0;
    for (float e : x) ref += double(e) * double(e);
    EXPECT_TRUE(testref::all_close({kernels::sum_squares(n, x.data())}, {ref}, Tol<float>::rel, "sum of squares"));
  }
}

// The header promises double accumulation; the squares here (1e36) and the total (3e39, norm 5.5e19) are
// finite in double, but 1024 of the squares summed in fp32 overflow (fp32 max 3.4e38). A gradient norm
// of inf instead of 5.5e19 turns clipping's max_norm / norm into 0.
TEST(AdamW, SumSquaresLargeValuesDoNotOverflow) {
  std::vector<float> big(3000, 1e18f);
  EXPECT_TRUE(testref::all_close({kernels::sum_squares(3000, big.data())}, {3000 * 1e36}, Tol<float>::rel, "large"));
}


}  // namespace
}  // namespace tessel
