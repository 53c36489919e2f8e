#include "tessel/kernels/fp8.h"

#include <algorithm>
#include <cmath>

#include "tessel/core/check.h"

namespace tessel::kernels {

namespace {

int64_t tiles(int64_t n) { return (n + kFp8Tile - 1) / kFp8Tile; }

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
  const float scaled = bits_f32(a) * std::ldexp(1.0f, -STEP_LOG2);
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

void check_format(DType fmt) {
  TESSEL_CHECK(fmt == DType::e4m3 || fmt == DType::e5m2, "FP8 format must be e4m3 or e5m2, got {}", dtype_name(fmt));
}

// max |x|; NaN if any element is NaN.
template <class T>
float amax_run(int64_t n, const T* x) {
  float m = 0.0f;
  bool nan = false;
#pragma omp simd reduction(max : m) reduction(|| : nan)
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::fabs(float(x[i]));
    nan = nan || v != v;
    m = std::max(m, v);
  }
  return nan ? std::numeric_limits<float>::quiet_NaN() : m;
}

struct DecodeTables {
  float e4m3[256], e5m2[256];
  DecodeTables() {
    for (int b = 0; b < 256; ++b) {
      e4m3[b] = e4m3_to_f32(uint8_t(b));
      e5m2[b] = e5m2_to_f32(uint8_t(b));
    }
  }
};

// out[i] = bf16(decode(q[i]) * scale_inv) through the format's 256-entry table.
void dequantize_run(int64_t n, const uint8_t* q, DType fmt, float scale_inv, bf16* out) {
  static const DecodeTables tables;
  const float* table = fmt == DType::e4m3 ? tables.e4m3 : tables.e5m2;
  for (int64_t i = 0; i < n; ++i) out[i] = bf16(table[q[i]] * scale_inv);
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
  const int64_t chunk = 1 << 16;
  if (n <= chunk) return amax_run(n, x);  // tiles: no parallel region (its setup costs more than 128 elements)
  float m = 0.0f;
#pragma omp parallel for reduction(max : m) schedule(static)
  for (int64_t b = 0; b < n; b += chunk) {
    const float v = amax_run(std::min(chunk, n - b), x + b);
    m = std::isnan(m) || std::isnan(v) ? NAN : std::max(m, v);
  }
  return m;
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
      const float s = fp8_scale_for(amax_run(w, x + r * ldx + c0), fmt, 0, pow2);
      quantize_any(w, x + r * ldx + c0, s, fmt, out + r * C + c0);
      scale_inv[r * nt + t] = 1.0f / s;
    }
}

template <class T>
void fp8_quantize_col_tiles_transposed(int64_t R, int64_t C, const T* x, int64_t ldx, DType fmt, bool pow2,
                                       uint8_t* out, float* scale_inv) {
  check_format(fmt);
  constexpr int64_t kCols = 32;  // columns per work item: rows are read contiguously, then transposed
  const int64_t nt = tiles(R), ncb = (C + kCols - 1) / kCols;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t t = 0; t < nt; ++t)
    for (int64_t cb = 0; cb < ncb; ++cb) {
      const int64_t r0 = t * kFp8Tile, h = std::min(kFp8Tile, R - r0);
      const int64_t c0 = cb * kCols, w = std::min(kCols, C - c0);
      float tile[kCols][kFp8Tile];  // [column][row] of this 128-row tile
      for (int64_t i = 0; i < h; ++i)
        for (int64_t j = 0; j < w; ++j) tile[j][i] = float(x[(r0 + i) * ldx + c0 + j]);
      for (int64_t j = 0; j < w; ++j) {
        const float s = fp8_scale_for(amax_run(h, tile[j]), fmt, 0, pow2);
        quantize_any(h, tile[j], s, fmt, out + (c0 + j) * R + r0);
        scale_inv[(c0 + j) * nt + t] = 1.0f / s;
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
      for (int64_t i = 0; i < h; ++i) m = std::max(m, amax_run(w, x + (r0 + i) * C + c0));
      const float s = fp8_scale_for(m, fmt, 0, pow2);
      for (int64_t i = 0; i < h; ++i) quantize_any(w, x + (r0 + i) * C + c0, s, fmt, out + (r0 + i) * C + c0);
      scale_inv[br * nc + bc] = 1.0f / s;
    }
}

void fp8_dequantize(int64_t n, const uint8_t* q, DType fmt, float scale_inv, bf16* out) {
  check_format(fmt);
  const int64_t chunk = 1 << 16;
#pragma omp parallel for schedule(static) if (n > chunk)
  for (int64_t b = 0; b < n; b += chunk) dequantize_run(std::min(chunk, n - b), q + b, fmt, scale_inv, out + b);
}

namespace {
// [R, C] codes whose scales cover 128 columns and `rows_per_scale` rows (1: row tiles, 128: blocks).
void dequantize_tiled(int64_t R, int64_t C, int64_t rows_per_scale, const uint8_t* q, DType fmt,
                      const float* scale_inv, bf16* out) {
  check_format(fmt);
  const int64_t nt = tiles(C);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; ++r)
    for (int64_t t = 0; t < nt; ++t) {
      const int64_t c0 = t * kFp8Tile, w = std::min(kFp8Tile, C - c0);
      dequantize_run(w, q + r * C + c0, fmt, scale_inv[(r / rows_per_scale) * nt + t], out + r * C + c0);
    }
}
}  // namespace

void fp8_dequantize_row_tiles(int64_t R, int64_t C, const uint8_t* q, DType fmt, const float* scale_inv, bf16* out) {
  dequantize_tiled(R, C, 1, q, fmt, scale_inv, out);
}

void fp8_dequantize_blocks(int64_t R, int64_t C, const uint8_t* q, DType fmt, const float* scale_inv, bf16* out) {
  dequantize_tiled(R, C, kFp8Tile, q, fmt, scale_inv, out);
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
