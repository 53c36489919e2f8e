#include "tessel/kernels/norm.h"

#include <omp.h>

#include <cmath>
#include <vector>

#include "tessel/kernels/cpu/elementwise.h"
#include "tessel/kernels/cpu/fp8_emit.h"

namespace tessel::kernels {
namespace {

// Per-thread partial sums for weight gradients, reduced at the end (no atomics in the row loop).
struct ColumnPartials {
  ColumnPartials(int64_t D, int n) : D(D), buf(size_t(D) * size_t(n), 0.0f) {}
  float* of(int t) { return buf.data() + size_t(t) * size_t(D); }
  void reduce_into(float* out, int n) {
    for (int t = 0; t < n; ++t) {
      const float* p = of(t);
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) out[j] += p[j];
    }
  }
  int64_t D;
  std::vector<float> buf;
};

inline void add_residual(int64_t D, const float* r_in, const float* delta, float* r) {
  if (delta) {
#pragma omp simd
    for (int64_t j = 0; j < D; ++j) r[j] = r_in[j] + delta[j];
  } else if (r != r_in) {
#pragma omp simd
    for (int64_t j = 0; j < D; ++j) r[j] = r_in[j];
  }
}

// Row i: r_out = r_in + delta, y = r_out * rstd * w; returns rstd.
template <class Ty>
inline float rmsnorm_row(int64_t i, int64_t D, const float* r_in, const float* delta, float* r_out, const float* w,
                         float eps, Ty* y) {
  float* r = r_out + i * D;
  add_residual(D, r_in + i * D, delta ? delta + i * D : nullptr, r);
  float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
  for (int64_t j = 0; j < D; ++j) ss += r[j] * r[j];
  const float rs = 1.0f / std::sqrt(ss / float(D) + eps);
#pragma omp simd
  for (int64_t j = 0; j < D; ++j) store_as(y + j, r[j] * rs * w[j]);
  return rs;
}

// Row i: r_out = r_in + delta, y = (r_out - mean) * rstd * w + b; mean[i], rstd[i] stored.
template <class Ty>
inline void layernorm_row(int64_t i, int64_t D, const float* r_in, const float* delta, float* r_out, const float* w,
                          const float* b, float eps, Ty* y, float* mean, float* rstd) {
  float* r = r_out + i * D;
  add_residual(D, r_in + i * D, delta ? delta + i * D : nullptr, r);
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < D; ++j) s += r[j];
  const float mu = s / float(D);
  float var = 0.0f;
#pragma omp simd reduction(+ : var)
  for (int64_t j = 0; j < D; ++j) var += (r[j] - mu) * (r[j] - mu);
  const float rs = 1.0f / std::sqrt(var / float(D) + eps);
  mean[i] = mu;
  rstd[i] = rs;
#pragma omp simd
  for (int64_t j = 0; j < D; ++j) store_as(y + j, (r[j] - mu) * rs * w[j] + b[j]);
}

}  // namespace

template <class Ty>
void rmsnorm_fwd(int64_t N, int64_t D, const float* r_in, const float* delta, float* r_out, const float* w, float eps,
                 Ty* y, float* rstd) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) rstd[i] = rmsnorm_row(i, D, r_in, delta, r_out, w, eps, y + i * D);
}

void rmsnorm_fwd_fp8(int64_t N, int64_t D, const float* r_in, const float* delta, float* r_out, const float* w,
                     float eps, const Fp8Out& y, float* rstd) {
  emit_fp8_rows(N, D, y, [&](int64_t i, float* row) { rstd[i] = rmsnorm_row(i, D, r_in, delta, r_out, w, eps, row); });
}

void rmsnorm_bwd(int64_t N, int64_t D, const float* x, const float* w, const float* rstd, const float* dy,
                 const float* dresid, float* dx, float* dw) {
  const int nt = omp_get_max_threads();
  ColumnPartials pdw(D, nt);
#pragma omp parallel
  {
    float* my_dw = pdw.of(omp_get_thread_num());
#pragma omp for schedule(static)
    for (int64_t i = 0; i < N; ++i) {
      const float* xi = x + i * D;
      const float* dyi = dy + i * D;
      const float rs = rstd[i];
      // y = xhat * w, xhat = x * rs.  dx = rs * (g - xhat * mean(g * xhat)), g = dy * w.
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j < D; ++j) {
        dot += dyi[j] * w[j] * xi[j];
        my_dw[j] += dyi[j] * xi[j] * rs;
      }
      const float c = dot * rs * rs / float(D);
      float* dxi = dx + i * D;
      const float* dri = dresid ? dresid + i * D : nullptr;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        const float g = rs * (dyi[j] * w[j] - xi[j] * c);
        dxi[j] = dri ? dri[j] + g : g;
      }
    }
  }
  pdw.reduce_into(dw, nt);
}

template <class Ty>
void layernorm_fwd(int64_t N, int64_t D, const float* r_in, const float* delta, float* r_out, const float* w,
                   const float* b, float eps, Ty* y, float* mean, float* rstd) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) layernorm_row(i, D, r_in, delta, r_out, w, b, eps, y + i * D, mean, rstd);
}

void layernorm_fwd_fp8(int64_t N, int64_t D, const float* r_in, const float* delta, float* r_out, const float* w,
                       const float* b, float eps, const Fp8Out& y, float* mean, float* rstd) {
  emit_fp8_rows(N, D, y,
                [&](int64_t i, float* row) { layernorm_row(i, D, r_in, delta, r_out, w, b, eps, row, mean, rstd); });
}

void layernorm_bwd(int64_t N, int64_t D, const float* x, const float* w, const float* mean, const float* rstd,
                   const float* dy, const float* dresid, float* dx, float* dw, float* db) {
  const int nt = omp_get_max_threads();
  ColumnPartials pdw(D, nt), pdb(D, nt);
#pragma omp parallel
  {
    float* my_dw = pdw.of(omp_get_thread_num());
    float* my_db = pdb.of(omp_get_thread_num());
#pragma omp for schedule(static)
    for (int64_t i = 0; i < N; ++i) {
      const float* xi = x + i * D;
      const float* dyi = dy + i * D;
      const float mu = mean[i], rs = rstd[i];
      // g = dy * w; dx = rs * (g - mean(g) - xhat * mean(g * xhat)).
      float sg = 0.0f, sgx = 0.0f;
#pragma omp simd reduction(+ : sg, sgx)
      for (int64_t j = 0; j < D; ++j) {
        const float xhat = (xi[j] - mu) * rs;
        const float g = dyi[j] * w[j];
        sg += g;
        sgx += g * xhat;
        my_dw[j] += dyi[j] * xhat;
        my_db[j] += dyi[j];
      }
      sg /= float(D);
      sgx /= float(D);
      float* dxi = dx + i * D;
      const float* dri = dresid ? dresid + i * D : nullptr;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) {
        const float xhat = (xi[j] - mu) * rs;
        const float g = rs * (dyi[j] * w[j] - sg - xhat * sgx);
        dxi[j] = dri ? dri[j] + g : g;
      }
    }
  }
  pdw.reduce_into(dw, nt);
  pdb.reduce_into(db, nt);
}

template void rmsnorm_fwd<float>(int64_t, int64_t, const float*, const float*, float*, const float*, float, float*,
                                 float*);
template void rmsnorm_fwd<bf16>(int64_t, int64_t, const float*, const float*, float*, const float*, float, bf16*,
                                float*);
template void layernorm_fwd<float>(int64_t, int64_t, const float*, const float*, float*, const float*, const float*,
                                   float, float*, float*, float*);
template void layernorm_fwd<bf16>(int64_t, int64_t, const float*, const float*, float*, const float*, const float*,
                                  float, bf16*, float*, float*);

}  // namespace tessel::kernels
