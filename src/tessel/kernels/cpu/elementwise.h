#pragma once
// Scalar helpers written so GCC vectorises the loops that call them (AVX-512 with -march=native):
// branch-free, inline, no libm calls in hot loops.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "tessel/core/dtype.h"

namespace tessel::kernels {

inline float to_f32(float x) { return x; }
inline float to_f32(bf16 x) {
  uint32_t u = uint32_t(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round-to-nearest-even store; NaN stays NaN. Branch-free so it vectorises.
inline void store_as(float* p, float v) { *p = v; }
inline void store_as(bf16* p, float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40u;
  p->bits = uint16_t((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

// max(init, x[0], ..., x[n-1]), NaNs passed over as std::max(m, x) passes them. GCC 12 leaves an
// `omp simd reduction(max)` over std::max scalar (one vmaxss after another, each waiting for the
// last); 16 running maxima of `x > m ? x : m` (vmaxps's own rule) vectorise. The maximum of the
// numbers is the same in any order (but for the sign of a zero maximum).
inline float max_of(int64_t n, const float* x, float init) {
  constexpr int kLanes = 16;
  float part[kLanes];
  for (float& p : part) p = init;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
#pragma omp simd
    for (int k = 0; k < kLanes; ++k) part[k] = x[j + k] > part[k] ? x[j + k] : part[k];
  float m = init;
  for (float p : part) m = p > m ? p : m;
  for (; j < n; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

// exp(x) for x <= 88, relative error < 2e-7 on the range softmax uses; underflows to 0 below -87.
// exp(x) = 2^n * exp(r), n = round(x / ln2), |r| <= ln2 / 2, exp(r) by a degree-6 Taylor polynomial.
inline float fast_exp(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  const float n = std::nearbyint(x * 1.4426950408889634f);
  const float r = x - n * 0.693145751953125f - n * 1.428606765330187e-06f;  // Cody-Waite split of ln2
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // NaN in, NaN out (through p); its exponent is taken as 0, as converting NaN to int is undefined.
  int32_t bits = (int32_t(n == n ? n : 0.0f) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return p * scale;
}

// The result below -87 is tiny but nonzero; callers that need exact zeros (masked scores) mask first.

}  // namespace tessel::kernels
