#include "tessel/kernels/fp8.h"

#include <algorithm>
#include <cmath>

#include "tessel/core/check.h"

namespace tessel::kernels {

namespace {

int64_t tiles(int64_t n) { return (n + kFp8Tile - 1) / kFp8Tile; }

// E4M3: bias 7, 3 mantissa bits, max 448 (0x7E), NaN 0x7F, smallest normal 2^-6, subnormal step 2^-9.
inline uint8_t encode_e4m3(float x) {
  const uint32_t u = f32_bits(x), a = u & 0x7fffffffu;
  const uint8_t sign = uint8_t((u >> 24) & 0x80u);
  if (a > 0x7f800000u) return sign | 0x7f;               // NaN
  if (a >= 0x43e00000u) return sign | 0x7e;              // |x| >= 448 (and inf): saturate
  if (a >= 0x3c800000u) {                                // |x| >= 2^-6: normal, round 20 bits away (RNE)
    const uint32_t r = (a + 0x7ffffu + ((a >> 20) & 1u)) & 0xfff00000u;
    return sign | uint8_t((((r >> 23) - 120u) << 3) | ((r >> 20) & 7u));
  }
  return sign | uint8_t(std::nearbyint(bits_f32(a) * 512.0f));  // multiples of 2^-9 (8 = smallest normal)
}

// E5M2: bias 15, 2 mantissa bits, max 57344 (0x7B), NaN 0x7F, smallest normal 2^-14, step 2^-16.
inline uint8_t encode_e5m2(float x) {
  const uint32_t u = f32_bits(x), a = u & 0x7fffffffu;
  const uint8_t sign = uint8_t((u >> 24) & 0x80u);
  if (a > 0x7f800000u) return sign | 0x7f;
  if (a >= 0x47600000u) return sign | 0x7b;              // |x| >= 57344: saturate
  if (a >= 0x38800000u) {
    const uint32_t r = (a + 0xfffffu + ((a >> 21) & 1u)) & 0xffe00000u;
    return sign | uint8_t((((r >> 23) - 112u) << 2) | ((r >> 21) & 3u));
  }
  return sign | uint8_t(std::nearbyint(bits_f32(a) * 65536.0f));
}

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

void check_format(DType fmt) {
  TESSEL_CHECK(fmt == DType::e4m3 || fmt == DType::e5m2, "FP8 format must be e4m3 or e5m2, got {}", dtype_name(fmt));
}

}  // namespace

float fp8_max(DType fmt) {
  check_format(fmt);
  return fmt == DType::e4m3 ? 448.0f : 57344.0f;
}

uint8_t fp8_encode(float x, DType fmt) { return fmt == DType::e4m3 ? encode_e4m3(x) : encode_e5m2(x); }
float fp8_decode(uint8_t q, DType fmt) { return fmt == DType::e4m3 ? e4m3_to_f32(q) : e5m2_to_f32(q); }

float fp8_scale_for(float a, DType fmt, int margin, bool pow2) {
  if (!(a > 0.0f) || !std::isfinite(a)) return 1.0f;
  float s = fp8_max(fmt) / a / std::ldexp(1.0f, margin);
  if (!std::isfinite(s)) s = std::numeric_limits<float>::max();
  if (pow2) s = std::ldexp(1.0f, std::ilogb(s));  // round down: a * s stays <= fp8 max
  return s;
}

template <class T>
float amax(int64_t n, const T* x) {
  float m = 0.0f;
  bool nan = false;
#pragma omp parallel for reduction(max : m) reduction(|| : nan) schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::fabs(float(x[i]));
    nan = nan || std::isnan(v);
    m = std::max(m, v);
  }
  return nan ? std::numeric_limits<float>::quiet_NaN() : m;
}

template <class T>
void fp8_quantize(int64_t n, const T* x, float scale, DType fmt, uint8_t* out) {
  check_format(fmt);
  const int64_t chunk = 1 << 16;
#pragma omp parallel for schedule(static) if (n > chunk)
  for (int64_t b = 0; b < n; b += chunk) quantize_any(std::min(chunk, n - b), x + b, scale, fmt, out + b);
}

template <class T>
void fp8_quantize_row_tiles(int64_t R, int64_t C, const T* x, int64_t ldx, DType fmt, bool pow2, uint8_t* out,
                            float* scale_inv) {
  check_format(fmt);
  const int64_t nt = tiles(C);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; ++r)
    for (int64_t t = 0; t < nt; ++t) {
      const int64_t c0 = t * kFp8Tile, w = std::min(kFp8Tile, C - c0);
      const float s = fp8_scale_for(amax(w, x + r * ldx + c0), fmt, 0, pow2);
      quantize_any(w, x + r * ldx + c0, s, fmt, out + r * C + c0);
      scale_inv[r * nt + t] = 1.0f / s;
    }
}

template <class T>
void fp8_quantize_col_tiles_transposed(int64_t R, int64_t C, const T* x, int64_t ldx, DType fmt, bool pow2,
                                       uint8_t* out, float* scale_inv) {
  check_format(fmt);
  const int64_t nt = tiles(R);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C; ++c) {
    float column[kFp8Tile];
    for (int64_t t = 0; t < nt; ++t) {
      const int64_t r0 = t * kFp8Tile, h = std::min(kFp8Tile, R - r0);
      for (int64_t i = 0; i < h; ++i) column[i] = float(x[(r0 + i) * ldx + c]);
      const float s = fp8_scale_for(amax(h, column), fmt, 0, pow2);
      quantize_any(h, column, s, fmt, out + c * R + r0);
      scale_inv[c * nt + t] = 1.0f / s;
    }
  }
}

void fp8_quantize_blocks(int64_t R, int64_t C, const float* x, DType fmt, bool pow2, uint8_t* out, float* scale_inv) {
  check_format(fmt);
  const int64_t nr = tiles(R), nc = tiles(C);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t br = 0; br < nr; ++br)
    for (int64_t bc = 0; bc < nc; ++bc) {
      const int64_t r0 = br * kFp8Tile, c0 = bc * kFp8Tile;
      const int64_t h = std::min(kFp8Tile, R - r0), w = std::min(kFp8Tile, C - c0);
      float m = 0.0f;
      for (int64_t i = 0; i < h; ++i) m = std::max(m, amax(w, x + (r0 + i) * C + c0));
      const float s = fp8_scale_for(m, fmt, 0, pow2);
      for (int64_t i = 0; i < h; ++i) quantize_any(w, x + (r0 + i) * C + c0, s, fmt, out + (r0 + i) * C + c0);
      scale_inv[br * nc + bc] = 1.0f / s;
    }
}

void fp8_dequantize(int64_t n, const uint8_t* q, DType fmt, float scale_inv, bf16* out) {
  check_format(fmt);
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) out[i] = bf16(fp8_decode(q[i], fmt) * scale_inv);
}

void fp8_dequantize_row_tiles(int64_t R, int64_t C, const uint8_t* q, DType fmt, const float* scale_inv, bf16* out) {
  check_format(fmt);
  const int64_t nt = tiles(C);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) out[r * C + c] = bf16(fp8_decode(q[r * C + c], fmt) * scale_inv[r * nt + c / kFp8Tile]);
}

void fp8_dequantize_blocks(int64_t R, int64_t C, const uint8_t* q, DType fmt, const float* scale_inv, bf16* out) {
  check_format(fmt);
  const int64_t nc = tiles(C);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c)
      out[r * C + c] = bf16(fp8_decode(q[r * C + c], fmt) * scale_inv[(r / kFp8Tile) * nc + c / kFp8Tile]);
}

template float amax(int64_t, const float*);
template float amax(int64_t, const bf16*);
template void fp8_quantize(int64_t, const float*, float, DType, uint8_t*);
template void fp8_quantize(int64_t, const bf16*, float, DType, uint8_t*);
template void fp8_quantize_row_tiles(int64_t, int64_t, const float*, int64_t, DType, bool, uint8_t*, float*);
template void fp8_quantize_row_tiles(int64_t, int64_t, const bf16*, int64_t, DType, bool, uint8_t*, float*);
template void fp8_quantize_col_tiles_transposed(int64_t, int64_t, const float*, int64_t, DType, bool, uint8_t*, float*);
template void fp8_quantize_col_tiles_transposed(int64_t, int64_t, const bf16*, int64_t, DType, bool, uint8_t*, float*);

}  // namespace tessel::kernels
