#include "tessel/kernels/fp8.h"

#include <algorithm>
#include <cmath>

#include "tessel/core/check.h"
#include "tessel/kernels/cpu/fp8_codec.h"

namespace tessel::kernels {

namespace {

using namespace fp8_codec;

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

template <class T>
void fp8_quantize_blocks(int64_t R, int64_t C, const T* x, DType fmt, bool pow2, uint8_t* out, float* scale_inv) {
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
template void fp8_quantize_blocks(int64_t, int64_t, const float*, DType, bool, uint8_t*, float*);
template void fp8_quantize_blocks(int64_t, int64_t, const bf16*, DType, bool, uint8_t*, float*);
template void fp8_quantize_col_tiles_transposed(int64_t, int64_t, const bf16*, int64_t, DType, bool, uint8_t*, float*);

}  // namespace tessel::kernels
