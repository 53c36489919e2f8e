#pragma once
// Naive double-precision reference implementations for the kernel tests, plus the one tolerance
// table every kernel test uses and a comparison helper.
//
// The references are written from the mathematical definitions (not from the kernels): plain loops,
// double accumulation, no tiling, no online softmax, libm exp/tanh/log.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tessel/core/dtype.h"

namespace tessel::testref {

// ---------------------------------------------------------------------------------------------------
// Tolerances, one per storage dtype of the value being checked. An error is measured as
//   max_i |got_i - ref_i| / max_i |ref_i|        (relative to the largest reference magnitude),
// so cancellation in single elements does not produce spurious failures while any systematic error
// (wrong term, wrong index, missing scale) still shows up at O(1).
//
// f32: unit roundoff 2^-24 = 6e-8. The kernels accumulate at most a few hundred terms in fp32 and use
//      a polynomial exp with relative error < 2e-7, so the observed errors are ~1e-6 of the largest
//      magnitude; 1e-5 leaves a 10x margin and is still ~1e5 times smaller than any real bug.
// bf16: 8 significand bits (7 stored), unit roundoff 2^-9 = 2e-3. A value rounded once to bf16 is off
//      by up to 2e-3 relative to itself (hence to the max magnitude); a value computed from an
//      already-rounded bf16 intermediate (e.g. attention backward's D = dO . O with O in bf16) picks up
//      a few such roundoffs. 1e-2 = 5 unit roundoffs.
// Finite differences are a different kind of check (truncation O(h^2) plus fp32 forward noise
// O(u |L| / h)), so they get their own bar, kFiniteDiffRel below, not a dtype entry.
template <class T>
struct Tol;
template <>
struct Tol<float> {
  static constexpr double rel = 1e-5;
};
template <>
struct Tol<bf16> {
  static constexpr double rel = 1e-2;
};

// Central differences with h = 1e-2 on an fp32 forward: truncation ~h^2 |f'''| / 6 ~ 1e-5..1e-4, and
// rounding noise ~ sqrt(D) * 6e-8 * |dL/dy| / (2h) ~ 3e-5 for D = 130. 2e-3 relative to the largest
// gradient magnitude is ~20x above both and far below any wrong-formula error.
inline constexpr double kFiniteDiffH = 1e-2;
inline constexpr double kFiniteDiffRel = 2e-3;

// ---------------------------------------------------------------------------------------------------
// Conversions and random data.
inline size_t sz(int64_t n) { return static_cast<size_t>(n); }  // avoids `T v(size_t(n))` vexing parses
inline double to_d(float x) { return double(x); }
inline double to_d(bf16 x) { return double(float(x)); }
inline double to_d(double x) { return x; }

// The value an fp32 x has after a round trip through bf16.
inline float round_bf16(float x) { return float(bf16(x)); }

template <class T>
inline void store_d(T* p, double v) {
  if constexpr (std::is_same_v<T, float>) *p = float(v);
  else *p = T(float(v));
}

struct Rand {
  explicit Rand(uint64_t seed) : gen(seed) {}
  double normal() { return std::normal_distribution<double>(0.0, 1.0)(gen); }
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(gen); }
  int64_t integer(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(gen); }  // [lo, hi]
  std::vector<float> normals(size_t n, double scale = 1.0) {
    std::vector<float> v(n);
    for (auto& x : v) x = float(scale * normal());
    return v;
  }
  std::mt19937_64 gen;
};

template <class T>
std::vector<double> to_double(const T* p, size_t n) {
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = to_d(p[i]);
  return out;
}
template <class T>
std::vector<double> to_double(const std::vector<T>& v) {
  return to_double(v.data(), v.size());
}

// max |got - ref| / max |ref| <= rel (absolute when the reference is all zeros). NaN/inf in `got` where
// the reference is finite always fails. The message names the worst element.
// scale_floor: a lower bound for max |ref| where the result is a difference of much larger terms (e.g.
// the norm backward for D = 1, where dx = rstd * (g - x c) cancels almost exactly); the rounding error
// then scales with those terms, not with the tiny difference.
inline ::testing::AssertionResult all_close(const std::vector<double>& got, const std::vector<double>& ref,
                                            double rel, const std::string& what = "", double scale_floor = 0.0) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure() << what << ": size " << got.size() << " vs reference " << ref.size();
  double scale = scale_floor;
  for (double r : ref) scale = std::max(scale, std::fabs(r));
  if (scale == 0.0) scale = 1.0;
  double worst = 0.0;
  size_t wi = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double e = std::fabs(got[i] - ref[i]);
    if (!std::isfinite(got[i]) && std::isfinite(ref[i]))
      return ::testing::AssertionFailure() << what << ": element " << i << " is " << got[i] << ", reference "
                                           << ref[i];
    if (e > worst) worst = e, wi = i;
  }
  if (worst / scale <= rel) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": max error " << worst << " (" << worst / scale
                                       << " of max |ref| = " << scale << ", tolerance " << rel << ") at element "
                                       << wi << ": got " << got[wi] << ", reference " << ref[wi];
}

// ---------------------------------------------------------------------------------------------------
// GEMM: C = op(A) op(B) (+ bias) (+ C). A stored [M, K] (or [K, M] when transA) with leading dimension
// lda; likewise B [K, N] (or [N, K]). All in double.
inline void gemm(int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, bool ta, const double* B,
                 int64_t ldb, bool tb, double* C, int64_t ldc, bool accumulate, const double* bias) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double a = ta ? A[k * lda + i] : A[i * lda + k];
        const double b = tb ? B[j * ldb + k] : B[k * ldb + j];
        s += a * b;
      }
      if (bias) s += bias[j];
      C[i * ldc + j] = accumulate ? C[i * ldc + j] + s : s;
    }
}

// ---------------------------------------------------------------------------------------------------
// RMSNorm / LayerNorm on x (already the residual sum), rows of width D.
//   rms:  y = x / sqrt(mean(x^2) + eps) * w
//   ln:   y = (x - mean) / sqrt(var + eps) * w + b     (biased variance)
// Backward of L with dL/dy = dy: derived from the Jacobian written out element by element.
inline void rmsnorm_fwd(int64_t N, int64_t D, const double* x, const double* w, double eps, double* y,
                        double* rstd) {
  for (int64_t i = 0; i < N; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < D; ++j) ss += x[i * D + j] * x[i * D + j];
    const double r = 1.0 / std::sqrt(ss / double(D) + eps);
    rstd[i] = r;
    for (int64_t j = 0; j < D; ++j) y[i * D + j] = x[i * D + j] * r * w[j];
  }
}

// dx_k = sum_j dy_j w_j d(x_j r)/dx_k,  d(x_j r)/dx_k = r delta_jk - x_j x_k r^3 / D.
inline void rmsnorm_bwd(int64_t N, int64_t D, const double* x, const double* w, double eps, const double* dy,
                        double* dx, double* dw) {
  for (int64_t i = 0; i < N; ++i) {
    const double* xi = x + i * D;
    double ss = 0;
    for (int64_t j = 0; j < D; ++j) ss += xi[j] * xi[j];
    const double r = 1.0 / std::sqrt(ss / double(D) + eps);
    for (int64_t k = 0; k < D; ++k) {
      double g = 0;
      for (int64_t j = 0; j < D; ++j) {
        const double jac = (j == k ? r : 0.0) - xi[j] * xi[k] * r * r * r / double(D);
        g += dy[i * D + j] * w[j] * jac;
      }
      dx[i * D + k] = g;
    }
    for (int64_t j = 0; j < D; ++j) dw[j] += dy[i * D + j] * xi[j] * r;
  }
}

inline void layernorm_fwd(int64_t N, int64_t D, const double* x, const double* w, const double* b, double eps,
                          double* y, double* mean, double* rstd) {
  for (int64_t i = 0; i < N; ++i) {
    double s = 0;
    for (int64_t j = 0; j < D; ++j) s += x[i * D + j];
    const double mu = s / double(D);
    double v = 0;
    for (int64_t j = 0; j < D; ++j) v += (x[i * D + j] - mu) * (x[i * D + j] - mu);
    const double r = 1.0 / std::sqrt(v / double(D) + eps);
    mean[i] = mu;
    rstd[i] = r;
    for (int64_t j = 0; j < D; ++j) y[i * D + j] = (x[i * D + j] - mu) * r * w[j] + b[j];
  }
}

// xhat_j = (x_j - mu) r; d xhat_j / dx_k = r (delta_jk - 1/D) - xhat_j xhat_k r / D.
inline void layernorm_bwd(int64_t N, int64_t D, const double* x, const double* w, double eps, const double* dy,
                          double* dx, double* dw, double* db) {
  for (int64_t i = 0; i < N; ++i) {
    const double* xi = x + i * D;
    double s = 0;
    for (int64_t j = 0; j < D; ++j) s += xi[j];
    const double mu = s / double(D);
    double v = 0;
    for (int64_t j = 0; j < D; ++j) v += (xi[j] - mu) * (xi[j] - mu);
    const double r = 1.0 / std::sqrt(v / double(D) + eps);
    std::vector<double> xh(static_cast<size_t>(D));
    for (int64_t j = 0; j < D; ++j) xh[size_t(j)] = (xi[j] - mu) * r;
    for (int64_t k = 0; k < D; ++k) {
      double g = 0;
      for (int64_t j = 0; j < D; ++j) {
        const double jac = r * ((j == k ? 1.0 : 0.0) - 1.0 / double(D)) - xh[size_t(j)] * xh[size_t(k)] * r / double(D);
        g += dy[i * D + j] * w[j] * jac;
      }
      dx[i * D + k] = g;
    }
    for (int64_t j = 0; j < D; ++j) {
      dw[j] += dy[i * D + j] * xh[size_t(j)];
      db[j] += dy[i * D + j];
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// Activations.
inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
inline double silu(double x) { return x * sigmoid(x); }
inline double silu_grad(double x) {
  const double s = sigmoid(x);
  return s + x * s * (1.0 - s);
}
inline constexpr double kGeluK = 0.79788456080286535588;  // sqrt(2 / pi)
inline constexpr double kGeluC = 0.044715;
inline double gelu_tanh(double x) { return 0.5 * x * (1.0 + std::tanh(kGeluK * (x + kGeluC * x * x * x))); }
inline double gelu_tanh_grad(double x) {
  const double u = kGeluK * (x + kGeluC * x * x * x);
  const double t = std::tanh(u);
  const double du = kGeluK * (1.0 + 3.0 * kGeluC * x * x);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du;
}

// ---------------------------------------------------------------------------------------------------
// RoPE, HF rotate-half: for j < Dh/2 with angle a = pos * base^(-2j/Dh):
//   y[j] = x[j] cos a - x[j + Dh/2] sin a,   y[j + Dh/2] = x[j + Dh/2] cos a + x[j] sin a.
inline void rope_head(int64_t Dh, int64_t pos, double base, const double* x, double* y) {
  const int64_t half = Dh / 2;
  for (int64_t j = 0; j < half; ++j) {
    const double a = double(pos) * std::pow(base, -2.0 * double(j) / double(Dh));
    y[j] = x[j] * std::cos(a) - x[j + half] * std::sin(a);
    y[j + half] = x[j + half] * std::cos(a) + x[j] * std::sin(a);
  }
}

// ---------------------------------------------------------------------------------------------------
// Attention on dense double arrays: q [B, T, H, Dh], k/v [B, T, G, Dh], out [B, T, H, Dh], lse [B, H, T].
// Probabilities by an explicit softmax over the full (masked) score row.
struct AttnRef {
  int64_t B, T, H, G, Dh;
  bool causal;
  double scale;
  int64_t qi(int64_t b, int64_t t, int64_t h, int64_t d) const { return ((b * T + t) * H + h) * Dh + d; }
  int64_t ki(int64_t b, int64_t t, int64_t g, int64_t d) const { return ((b * T + t) * G + g) * Dh + d; }
  int64_t group(int64_t h) const { return h / (H / G); }
  int64_t visible(int64_t t) const { return causal ? t + 1 : T; }

  // Probabilities P[j] of query (b, h, t) over keys j < visible(t); returns the log-sum-exp.
  double probs(const std::vector<double>& q, const std::vector<double>& k, int64_t b, int64_t h, int64_t t,
               std::vector<double>& P) const {
    const int64_t n = visible(t), g = group(h);
    P.assign(size_t(n), 0.0);
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t d = 0; d < Dh; ++d) s += q[size_t(qi(b, t, h, d))] * k[size_t(ki(b, j, g, d))];
      P[size_t(j)] = s * scale;
      mx = std::max(mx, P[size_t(j)]);
    }
    double sum = 0;
    for (auto& p : P) sum += std::exp(p - mx);
    const double lse = mx + std::log(sum);
    for (auto& p : P) p = std::exp(p - lse);
    return lse;
  }

  void fwd(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
           std::vector<double>& out, std::vector<double>& lse) const {
    out.assign(size_t(B * T * H * Dh), 0.0);
    lse.assign(size_t(B * H * T), 0.0);
    std::vector<double> P;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t t = 0; t < T; ++t) {
          lse[size_t((b * H + h) * T + t)] = probs(q, k, b, h, t, P);
          for (int64_t j = 0; j < int64_t(P.size()); ++j)
            for (int64_t d = 0; d < Dh; ++d)
              out[size_t(qi(b, t, h, d))] += P[size_t(j)] * v[size_t(ki(b, j, group(h), d))];
        }
  }

  // Gradients of L = sum(out * dout): with s_j = scale q.k_j, p = softmax(s), out = sum_j p_j v_j:
  //   dv_j += p_j dout;  dp_j = dout . v_j;  ds_j = p_j (dp_j - sum_l p_l dp_l);
  //   dq += scale sum_j ds_j k_j;  dk_j += scale ds_j q.
  // out_given (optional, [B, T, H, Dh]): the forward output the backward is handed, e.g. rounded to bf16.
  // FlashAttention's backward computes the row term sum_l p_l dp_l as dout . out, so with a rounded out
  // the exact function of its inputs uses dout . out_given there; without it the exact p . dp is used.
  //
  // Also returns, in mag (optional: {|dq|, |dk|, |dv|} term magnitudes), the same sums taken over the
  // absolute values of every term, with ds_j's magnitude p_j (sum_d |dout_d v_jd| + |row term|'s own
  // magnitude). Floating-point error in a gradient element is ~u times that, however much the terms
  // cancel (for T = 1 the exact dq and dk are 0 while each term is not).
  void bwd(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
           const std::vector<double>& dout, std::vector<double>& dq, std::vector<double>& dk,
           std::vector<double>& dv, const std::vector<double>* out_given = nullptr,
           std::vector<double>* mag = nullptr) const {
    dq.assign(q.size(), 0.0);
    dk.assign(k.size(), 0.0);
    dv.assign(v.size(), 0.0);
    std::vector<double> dummy[3];
    std::vector<double>* m = mag ? mag : dummy;
    m[0].assign(q.size(), 0.0);
    m[1].assign(k.size(), 0.0);
    m[2].assign(v.size(), 0.0);
    std::vector<double> dPabs;
    std::vector<double> P, dP;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t t = 0; t < T; ++t) {
          probs(q, k, b, h, t, P);
          const int64_t n = int64_t(P.size()), g = group(h);
          dP.assign(size_t(n), 0.0);
          dPabs.assign(size_t(n), 0.0);
          double pdp = 0, pdp_abs = 0;
          for (int64_t j = 0; j < n; ++j) {
            double s = 0, sa = 0;
            for (int64_t d = 0; d < Dh; ++d) {
              s += dout[size_t(qi(b, t, h, d))] * v[size_t(ki(b, j, g, d))];
              sa += std::fabs(dout[size_t(qi(b, t, h, d))] * v[size_t(ki(b, j, g, d))]);
            }
            dP[size_t(j)] = s;
            dPabs[size_t(j)] = sa;
            pdp += P[size_t(j)] * s;
            pdp_abs += P[size_t(j)] * sa;
          }
          if (out_given) {
            pdp = pdp_abs = 0;
            for (int64_t d = 0; d < Dh; ++d) {
              pdp += dout[size_t(qi(b, t, h, d))] * (*out_given)[size_t(qi(b, t, h, d))];
              pdp_abs += std::fabs(dout[size_t(qi(b, t, h, d))] * (*out_given)[size_t(qi(b, t, h, d))]);
            }
          }
          for (int64_t j = 0; j < n; ++j) {
            const double ds = P[size_t(j)] * (dP[size_t(j)] - pdp);
            const double ds_abs = P[size_t(j)] * (dPabs[size_t(j)] + pdp_abs);
            for (int64_t d = 0; d < Dh; ++d) {
              const double o = dout[size_t(qi(b, t, h, d))], kk = k[size_t(ki(b, j, g, d))],
                           qq = q[size_t(qi(b, t, h, d))];
              dv[size_t(ki(b, j, g, d))] += P[size_t(j)] * o;
              dq[size_t(qi(b, t, h, d))] += scale * ds * kk;
              dk[size_t(ki(b, j, g, d))] += scale * ds * qq;
              m[2][size_t(ki(b, j, g, d))] += P[size_t(j)] * std::fabs(o);
              m[0][size_t(qi(b, t, h, d))] += scale * ds_abs * std::fabs(kk);
              m[1][size_t(ki(b, j, g, d))] += scale * ds_abs * std::fabs(qq);
            }
          }
        }
  }
};

// ---------------------------------------------------------------------------------------------------
// Softmax cross-entropy of one row: loss = logsumexp(x) - x[t]; grad = (softmax(x) - onehot(t)) * scale.
inline double xent_row(int64_t V, const float* x, int64_t t, double scale, double* grad) {
  if (t < 0) {
    for (int64_t j = 0; j < V; ++j) grad[j] = 0.0;
    return 0.0;
  }
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < V; ++j) mx = std::max(mx, double(x[j]));
  double s = 0;
  for (int64_t j = 0; j < V; ++j) s += std::exp(double(x[j]) - mx);
  const double lse = mx + std::log(s);
  for (int64_t j = 0; j < V; ++j) grad[j] = (std::exp(double(x[j]) - lse) - (j == t ? 1.0 : 0.0)) * scale;
  return lse - double(x[t]);
}

// ---------------------------------------------------------------------------------------------------
// AdamW: one element of torch.optim.AdamW's single-tensor step, in double (t: the 1-based step count
// after this update):
//   p *= 1 - lr wd;  m += (g - m)(1 - b1);  v = b2 v + (1 - b2) g^2;
//   p -= (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps).
struct AdamWRef {
  double lr, beta1, beta2, eps, weight_decay;
  void step(int64_t t, double g, double& p, double& m, double& v) const {
    const double bc1 = 1.0 - std::pow(beta1, double(t)), bc2 = 1.0 - std::pow(beta2, double(t));
    p *= 1.0 - lr * weight_decay;
    m += (g - m) * (1.0 - beta1);
    v = v * beta2 + (1.0 - beta2) * g * g;
    p -= (lr / bc1) * m / (std::sqrt(v) / std::sqrt(bc2) + eps);
  }
};

}  // namespace tessel::testref
