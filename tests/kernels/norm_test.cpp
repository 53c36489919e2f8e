// RMSNorm and LayerNorm (with the fused residual add) against double references built from the
// element-wise Jacobian, and the backward against central finite differences of the kernel's own forward
// for L = sum(y * R) + sum(r_out * Q) (R plays dy, Q plays dresid).
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "kernels/reference.h"
#include "tessel/kernels/norm.h"

namespace tessel {
namespace {

using testref::Rand;
using testref::sz;
using testref::Tol;

enum class Kind { rms, ln };
enum class Dt { f32, bf16 };
constexpr float kEps = 1e-5f;

struct Inputs {
  Inputs(Kind kind, int64_t N, int64_t D, bool with_delta, uint64_t seed) : N(N), D(D) {
    Rand rng(seed);
    r_in = rng.normals(size_t(N * D));
    if (with_delta) delta = rng.normals(size_t(N * D), 0.5);
    w.resize(size_t(D));
    b.resize(size_t(D));
    for (auto& x : w) x = float(1.0 + 0.3 * rng.normal());
    for (auto& x : b) x = float(0.2 * rng.normal());
    if (kind == Kind::rms) b.assign(size_t(D), 0.0f);
    R = rng.normals(size_t(N * D));
    Q = rng.normals(size_t(N * D));
    dw0 = rng.normals(size_t(D));
    db0 = rng.normals(size_t(D));
  }
  int64_t N, D;
  std::vector<float> r_in, delta, w, b, R, Q, dw0, db0;
};

// Runs the kernel forward; returns r_out, y (as double), rstd, mean.
template <class Ty>
struct Fwd {
  std::vector<float> r_out, rstd, mean;
  std::vector<Ty> y;
};
template <class Ty>
Fwd<Ty> run_fwd(Kind kind, const Inputs& in) {
  Fwd<Ty> f;
  const size_t n = size_t(in.N * in.D);
  f.r_out.assign(n, -1.0f);
  f.y.resize(n);
  f.rstd.assign(size_t(in.N), -1.0f);
  f.mean.assign(size_t(in.N), -1.0f);
  const float* delta = in.delta.empty() ? nullptr : in.delta.data();
  if (kind == Kind::rms)
    kernels::rmsnorm_fwd<Ty>(in.N, in.D, in.r_in.data(), delta, f.r_out.data(), in.w.data(), kEps, f.y.data(),
                             f.rstd.data());
  else
    kernels::layernorm_fwd<Ty>(in.N, in.D, in.r_in.data(), delta, f.r_out.data(), in.w.data(), in.b.data(), kEps,
                               f.y.data(), f.mean.data(), f.rstd.data());
  return f;
}

// The residual sum in fp32 is exactly specified by IEEE, so the test computes it itself.
std::vector<float> residual_sum(const Inputs& in) {
  std::vector<float> x = in.r_in;
  if (!in.delta.empty())
    for (size_t i = 0; i < x.size(); ++i) x[i] = in.r_in[i] + in.delta[i];
  return x;
}

class NormTest : public ::testing::TestWithParam<std::tuple<Kind, Dt, int64_t, int64_t, bool>> {};

template <class Ty>
void check_forward(Kind kind, const Inputs& in) {
  const int64_t N = in.N, D = in.D;
  const Fwd<Ty> f = run_fwd<Ty>(kind, in);
  const std::vector<float> xs = residual_sum(in);
  for (size_t i = 0; i < xs.size(); ++i) ASSERT_EQ(f.r_out[i], xs[i]) << "r_out[" << i << "]";

  const std::vector<double> x = testref::to_double(xs), w = testref::to_double(in.w), b = testref::to_double(in.b);
  std::vector<double> y(static_cast<size_t>(N * D)), rstd(static_cast<size_t>(N)), mean(static_cast<size_t>(N));
  if (kind == Kind::rms)
    testref::rmsnorm_fwd(N, D, x.data(), w.data(), kEps, y.data(), rstd.data());
  else
    testref::layernorm_fwd(N, D, x.data(), w.data(), b.data(), kEps, y.data(), mean.data(), rstd.data());
  EXPECT_TRUE(testref::all_close(testref::to_double(f.y), y, Tol<Ty>::rel, "y"));
  EXPECT_TRUE(testref::all_close(testref::to_double(f.rstd), rstd, Tol<float>::rel, "rstd"));
  if (kind == Kind::ln) {
    // The mean's rounding error scales with the magnitudes summed, not with the (possibly tiny) mean.
    double xmax = 0;
    for (double v : x) xmax = std::max(xmax, std::fabs(v));
    for (int64_t i = 0; i < N; ++i) EXPECT_NEAR(f.mean[size_t(i)], mean[size_t(i)], Tol<float>::rel * xmax) << i;
  }
}

// dresid_mode: 0 none, 1 separate buffer, 2 dx aliases dresid.
void check_backward(Kind kind, const Inputs& in, int dresid_mode) {
  SCOPED_TRACE(::testing::Message() << "dresid_mode=" << dresid_mode);
  const int64_t N = in.N, D = in.D;
  const Fwd<float> f = run_fwd<float>(kind, in);
  std::vector<float> dx(size_t(N * D), 99.0f), dw = in.dw0, db = in.db0;
  std::vector<float> dresid = in.Q;
  const float* dres = dresid_mode ? dresid.data() : nullptr;
  float* dxp = dresid_mode == 2 ? dresid.data() : dx.data();
  if (kind == Kind::rms)
    kernels::rmsnorm_bwd(N, D, f.r_out.data(), in.w.data(), f.rstd.data(), in.R.data(), dres, dxp, dw.data());
  else
    kernels::layernorm_bwd(N, D, f.r_out.data(), in.w.data(), f.mean.data(), f.rstd.data(), in.R.data(), dres, dxp,
                           dw.data(), db.data());
  const std::vector<double> got_dx = testref::to_double(dxp, size_t(N * D));

  // Double reference.
  const std::vector<double> x = testref::to_double(residual_sum(in)), w = testref::to_double(in.w),
                            dy = testref::to_double(in.R);
  std::vector<double> rdx(size_t(N * D)), rdw = testref::to_double(in.dw0), rdb = testref::to_double(in.db0);
  if (kind == Kind::rms)
    testref::rmsnorm_bwd(N, D, x.data(), w.data(), kEps, dy.data(), rdx.data(), rdw.data());
  else
    testref::layernorm_bwd(N, D, x.data(), w.data(), kEps, dy.data(), rdx.data(), rdw.data(), rdb.data());
  if (dresid_mode)
    for (size_t i = 0; i < rdx.size(); ++i) rdx[i] += double(in.Q[i]);
  // dx = rstd * (dy w - <correction>): the two terms can cancel (completely for D = 1), so the error bar
  // is relative to the size of the terms, max rstd |dy w|, when that exceeds max |dx|.
  double term_scale = 0;
  {
    std::vector<double> rs(testref::sz(N)), scratch(testref::sz(N * D)), mu(testref::sz(N));
    const std::vector<double> b0(testref::sz(D), 0.0);
    testref::layernorm_fwd(N, D, x.data(), w.data(), b0.data(), kEps, scratch.data(), mu.data(), rs.data());
    if (kind == Kind::rms) testref::rmsnorm_fwd(N, D, x.data(), w.data(), kEps, scratch.data(), rs.data());
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < D; ++j)
        term_scale = std::max(term_scale, rs[testref::sz(i)] * std::fabs(dy[testref::sz(i * D + j)] * w[testref::sz(j)]));
  }
  EXPECT_TRUE(testref::all_close(got_dx, rdx, Tol<float>::rel, "dx", term_scale));
  EXPECT_TRUE(testref::all_close(testref::to_double(dw), rdw, Tol<float>::rel, "dw (accumulated)"));
  if (kind == Kind::ln) {
    EXPECT_TRUE(testref::all_close(testref::to_double(db), rdb, Tol<float>::rel, "db (accumulated)"));
  }

  // Finite differences of the kernel's forward (once, with dresid present, so it is covered too).
  if (dresid_mode != 1) return;
  auto row_losses = [&](const Inputs& p) {
    const Fwd<float> g = run_fwd<float>(kind, p);
    std::vector<double> L(sz(N), 0.0);
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < D; ++j) {
        const size_t e = sz(i * D + j);
        L[sz(i)] += double(g.y[e]) * double(p.R[e]) + double(g.r_out[e]) * double(p.Q[e]);
      }
    return L;
  };
  const float h = float(testref::kFiniteDiffH);
  // Row inputs (r_in, delta): row i's loss depends only on row i, so one forward pair perturbs one
  // column in every row at once and yields N derivatives.
  auto check_rows = [&](std::vector<float> Inputs::*field, const char* what) {
    double scale = std::max(1e-3, term_scale);
    for (double a : got_dx) scale = std::max(scale, std::fabs(a));
    for (int s = 0; s < 3; ++s) {
      Inputs pp = in, pm = in;
      std::vector<size_t> idx(sz(N));
      for (int64_t i = 0; i < N; ++i) {
        idx[sz(i)] = sz(i * D + (s == 0 ? 0 : s == 1 ? D - 1 : (i * 7 + 3) % D));
        (pp.*field)[idx[sz(i)]] += h;
        (pm.*field)[idx[sz(i)]] -= h;
      }
      const std::vector<double> lp = row_losses(pp), lm = row_losses(pm);
      for (int64_t i = 0; i < N; ++i) {
        const size_t e = idx[sz(i)];
        const double fd = (lp[sz(i)] - lm[sz(i)]) / (double((pp.*field)[e]) - double((pm.*field)[e]));
        EXPECT_NEAR(got_dx[e], fd, testref::kFiniteDiffRel * scale) << what << "[" << e << "]";
      }
    }
  };
  // Parameters (w, b) touch every row: one forward pair per checked element.
  auto check_param = [&](std::vector<float> Inputs::*field, const std::vector<double>& analytic, const char* what) {
    double scale = 1e-3;
    for (double a : analytic) scale = std::max(scale, std::fabs(a));
    for (int s = 0; s < 3; ++s) {
      const size_t j = sz(s == 0 ? 0 : s == 1 ? D - 1 : D / 2);
      Inputs pp = in, pm = in;
      (pp.*field)[j] += h;
      (pm.*field)[j] -= h;
      double lp = 0, lm = 0;
      for (double l : row_losses(pp)) lp += l;
      for (double l : row_losses(pm)) lm += l;
      const double fd = (lp - lm) / (double((pp.*field)[j]) - double((pm.*field)[j]));
      EXPECT_NEAR(analytic[j], fd, testref::kFiniteDiffRel * scale) << what << "[" << j << "]";
    }
  };
  check_rows(&Inputs::r_in, "dx vs FD");
  if (!in.delta.empty()) check_rows(&Inputs::delta, "d(delta) vs FD");
  std::vector<double> gdw(sz(D)), gdb(sz(D));
  for (int64_t j = 0; j < D; ++j) {
    gdw[sz(j)] = double(dw[sz(j)]) - double(in.dw0[sz(j)]);
    gdb[sz(j)] = double(db[sz(j)]) - double(in.db0[sz(j)]);
  }
  check_param(&Inputs::w, gdw, "dw vs FD");
  if (kind == Kind::ln) check_param(&Inputs::b, gdb, "db vs FD");
}

TEST_P(NormTest, ForwardAndBackward) {
  const auto [kind, dt, N, D, with_delta] = GetParam();
  const Inputs in(kind, N, D, with_delta, uint64_t(N * 1000 + D * 2 + with_delta + 7 * int(kind)));
  if (dt == Dt::f32) {
    check_forward<float>(kind, in);
    for (int mode = 0; mode < 3; ++mode) check_backward(kind, in, mode);
  } else {
    check_forward<bf16>(kind, in);  // backward does not depend on y's dtype
  }
}

std::string norm_case_name(const ::testing::TestParamInfo<NormTest::ParamType>& info) {
  const auto& [kind, dt, N, D, delta] = info.param;
  return std::string(kind == Kind::rms ? "rms_" : "ln_") + (dt == Dt::f32 ? "f32_" : "bf16_") + "N" +
         std::to_string(N) + "_D" + std::to_string(D) + (delta ? "_delta" : "");
}

INSTANTIATE_TEST_SUITE_P(Grid, NormTest,
                         ::testing::Combine(::testing::Values(Kind::rms, Kind::ln), ::testing::Values(Dt::f32, Dt::bf16),
                                            ::testing::Values<int64_t>(1, 3, 17),
                                            ::testing::Values<int64_t>(1, 3, 17, 63, 64, 65, 130), ::testing::Bool()),
                         norm_case_name);

// r_out may alias r_in when there is no delta (in-place residual stream).
TEST(Norm, InPlaceResidualWithoutDelta) {
  const int64_t N = 5, D = 33;
  Rand rng(3);
  std::vector<float> r = rng.normals(testref::sz(N * D)), w(testref::sz(D), 1.5f);
  const std::vector<float> r0 = r;
  std::vector<float> y(testref::sz(N * D)), rstd(testref::sz(N));
  kernels::rmsnorm_fwd<float>(N, D, r.data(), nullptr, r.data(), w.data(), kEps, y.data(), rstd.data());
  EXPECT_EQ(r, r0);
  std::vector<double> yr(testref::sz(N * D)), rr(testref::sz(N)), wd(testref::sz(D), 1.5);
  const std::vector<double> xd = testref::to_double(r0);
  testref::rmsnorm_fwd(N, D, xd.data(), wd.data(), kEps, yr.data(), rr.data());
  EXPECT_TRUE(testref::all_close(testref::to_double(y), yr, Tol<float>::rel, "y"));
}

}  // namespace
}  // namespace tessel
