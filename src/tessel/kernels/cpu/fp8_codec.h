#pragma once
// The FP8 codec shared by the quantisation kernels (fp8.cpp) and the fused producers that write
// FP8 directly (fp8_emit.h): element encoders, amax and quantisation runs. Internal to kernels/cpu.
#include <algorithm>
#include <cmath>
#include <limits>

#include "tessel/core/check.h"
#include "tessel/kernels/fp8.h"

namespace tessel::kernels::fp8_codec {

inline int64_t tiles(int64_t n) { return (n + kFp8Tile - 1) / kFp8Tile; }

// Branch-free (selects only, so loops over it vectorise), for a format with M mantissa bits,
// exponent bias B, largest finite |x| bits MAXBITS -> code MAXCODE, smallest normal bits MINNORM.
// Normal range: drop 23 - M mantissa bits with round-to-nearest-even and rebias the exponent.
// Subnormal range: |x| / step rounded to an integer (nearest even: adding and removing 2^23 in
// fp32 rounds a value below 2^23 to an integer that way). The code of a subnormal is that integer.
template <int M, int B, uint32_t MAXBITS, uint32_t MAXCODE, uint32_t MINNORM, int STEP_LOG2>
inline uint8_t encode_fp8(float x) {
  const uint32_t u = f32_bits(x), a = u & 0x7fffffffu;
  const uint32_t sign = (u >> 24) & 0x80u;
  constexpr int drop = 23 - M;
  const uint32_t r = (a + ((1u << (drop - 1)) - 1u) + ((a >> drop) & 1u)) >> drop;  // exponent:mantissa, rounded
  const uint32_t normal = r - (uint32_t(127 - B) << M);
  // Only a subnormal's `sub` is used; outside that range (huge, inf, NaN) the value converted is 0,
  // since a float-to-integer conversion of a value out of range is undefined behaviour.
  float scaled = bits_f32(a) * std::ldexp(1.0f, -STEP_LOG2);
  scaled = scaled < 8388608.0f ? scaled : 0.0f;
  const uint32_t sub = uint32_t((scaled + 8388608.0f) - 8388608.0f);
  uint32_t code = a >= MINNORM ? normal : sub;
  code = a >= MAXBITS ? MAXCODE : code;  // saturate (inf included)
  code = a > 0x7f800000u ? 0x7fu : code;  // NaN
  return uint8_t(sign | code);
}

// E4M3: bias 7, 3 mantissa bits, max 448 (0x7E), NaN 0x7F, smallest normal 2^-6, subnormal step 2^-9.
inline uint8_t encode_e4m3(float x) { return encode_fp8<3, 7, 0x43e00000u, 0x7eu, 0x3c800000u, -9>(x); }
// E5M2: bias 15, 2 mantissa bits, max 57344 (0x7B), NaN 0x7F, smallest normal 2^-14, step 2^-16.
inline uint8_t encode_e5m2(float x) { return encode_fp8<2, 15, 0x47600000u, 0x7bu, 0x38800000u, -16>(x); }

template <bool E4M3, class T>
void quantize_run(int64_t n, const T* x, float scale, uint8_t* out) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float v = float(x[i]) * scale;
    out[i] = E4M3 ? encode_e4m3(v) : encode_e5m2(v);
  }
}

template <class T>
void quantize_any(int64_t n, const T* x, float scale, DType fmt, uint8_t* out) {
  if (fmt == DType::e4m3)
    quantize_run<true>(n, x, scale, out);
  else
    quantize_run<false>(n, x, scale, out);
}

inline void check_format(DType fmt) {
  TESSEL_CHECK(fmt == DType::e4m3 || fmt == DType::e5m2, "FP8 format must be e4m3 or e5m2, got {}", dtype_name(fmt));
}

// max |x|; NaN if any element is NaN. 16 running maxima and NaN flags, as max_of
// (cpu/elementwise.h): GCC 12 left the `omp simd reduction(max)` form scalar, one vmaxss after
// another, 5% of an FP8 delayed step.
template <class T>
float amax_run(int64_t n, const T* x) {
  constexpr int kLanes = 16;
  float part[kLanes] = {};
  int nan[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
#pragma omp simd
    for (int k = 0; k < kLanes; ++k) {
      const float v = std::fabs(float(x[i + k]));
      nan[k] |= v != v;
      part[k] = v > part[k] ? v : part[k];
    }
  float m = 0.0f;
  int any_nan = 0;
  for (int k = 0; k < kLanes; ++k) {
    m = part[k] > m ? part[k] : m;
    any_nan |= nan[k];
  }
  for (; i < n; ++i) {
    const float v = std::fabs(float(x[i]));
    any_nan |= v != v;
    m = v > m ? v : m;
  }
  return any_nan ? std::numeric_limits<float>::quiet_NaN() : m;
}

}  // namespace tessel::kernels::fp8_codec
