#include "tessel/kernels/act.h"

#include <cmath>

#include "tessel/kernels/cpu/elementwise.h"
#include "tessel/kernels/cpu/fp8_emit.h"

namespace tessel::kernels {
namespace {
inline float sigmoid(float x) { return 1.0f / (1.0f + fast_exp(-x)); }
// tanh(u) = 1 - 2 / (exp(2u) + 1); fast_exp clamps, so large |u| saturates cleanly to +-1.
inline float tanh_fast(float u) { return 1.0f - 2.0f / (fast_exp(2.0f * u) + 1.0f); }
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluC = 0.044715f;
inline float gelu(float v) { return 0.5f * v * (1.0f + tanh_fast(kSqrt2OverPi * (v + kGeluC * v * v * v))); }

// One row: out[j] = silu(gate[j]) * up[j], gate = g[0, F), up = g[F, 2F).
template <class Ty>
inline void swiglu_row(int64_t F, const float* g, Ty* out) {
  const float* u = g + F;
#pragma omp simd
  for (int64_t j = 0; j < F; ++j) store_as(out + j, g[j] * sigmoid(g[j]) * u[j]);
}
}  // namespace

template <class Ty>
void swiglu_fwd(int64_t N, int64_t F, const float* gu, Ty* out) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) swiglu_row(F, gu + i * 2 * F, out + i * F);
}

void swiglu_fwd_fp8(int64_t N, int64_t F, const float* gu, const Fp8Out& out) {
  emit_fp8_rows(N, F, out, [&](int64_t i, float* row) { swiglu_row(F, gu + i * 2 * F, row); });
}

template <class Tg>
void swiglu_bwd(int64_t N, int64_t F, const float* gu, const float* dout, Tg* dgu) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* g = gu + i * 2 * F;
    const float* u = g + F;
    const float* d = dout + i * F;
    Tg* dg = dgu + i * 2 * F;
    Tg* du = dg + F;
#pragma omp simd
    for (int64_t j = 0; j < F; ++j) {
      const float s = sigmoid(g[j]);
      // d silu(g)/dg = s (1 + g (1 - s))
      store_as(dg + j, d[j] * u[j] * s * (1.0f + g[j] * (1.0f - s)));
      store_as(du + j, d[j] * g[j] * s);
    }
  }
}

template <class Ty>
void gelu_fwd(int64_t n, const float* x, Ty* out) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) store_as(out + i, gelu(x[i]));
}

void gelu_fwd_fp8(int64_t N, int64_t F, const float* x, const Fp8Out& out) {
  emit_fp8_rows(N, F, out, [&](int64_t i, float* row) {
    const float* xi = x + i * F;
#pragma omp simd
    for (int64_t j = 0; j < F; ++j) row[j] = gelu(xi[j]);
  });
}

template <class Tg>
void gelu_bwd(int64_t n, const float* x, const float* dout, Tg* dx) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float t = tanh_fast(kSqrt2OverPi * (v + kGeluC * v * v * v));
    const float dt = (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kGeluC * v * v);
    store_as(dx + i, dout[i] * (0.5f * (1.0f + t) + 0.5f * v * dt));
  }
}

template void swiglu_fwd<float>(int64_t, int64_t, const float*, float*);
template void swiglu_fwd<bf16>(int64_t, int64_t, const float*, bf16*);
template void swiglu_bwd<float>(int64_t, int64_t, const float*, const float*, float*);
template void swiglu_bwd<bf16>(int64_t, int64_t, const float*, const float*, bf16*);
template void gelu_fwd<float>(int64_t, const float*, float*);
template void gelu_fwd<bf16>(int64_t, const float*, bf16*);
template void gelu_bwd<float>(int64_t, const float*, const float*, float*);
template void gelu_bwd<bf16>(int64_t, const float*, const float*, bf16*);

}  // namespace tessel::kernels
