#pragma once
// The driver of every fused FP8 producer (fp8_fused.h): row(i, buf) computes row i of an [N, D]
// output in fp32 into buf (and whatever else the producer stores per row); emit_fp8_rows quantises
// each row as it is made. With column tiles it works on 128-row blocks: the block's rows go into a
// per-thread [128, D] scratch, are quantised row-wise, then 32 columns at a time are transposed and
// quantised as 128 x 1 tiles, all before the next block (the output never exists in fp32 or bf16
// as a whole tensor).
#include <omp.h>

#include <vector>

#include "tessel/kernels/cpu/fp8_codec.h"
#include "tessel/kernels/fp8_fused.h"

namespace tessel::kernels {

namespace fp8_emit_detail {
inline float nan_max(float a, float b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }

// Quantises one fp32 row of width D into row i of `out`; per tensor, folds its amax into m.
inline void emit_row(int64_t i, int64_t D, const float* v, const Fp8Out& out, float& m) {
  using namespace fp8_codec;
  uint8_t* q = out.data + i * D;
  if (!out.tiles) {
    m = nan_max(m, amax_run(D, v));
    quantize_any(D, v, out.scale, out.fmt, q);
    return;
  }
  const int64_t nt = tiles(D);
  for (int64_t t = 0; t < nt; ++t) {
    const int64_t c0 = t * kFp8Tile, w = std::min(kFp8Tile, D - c0);
    const float s = fp8_scale_for(amax_run(w, v + c0), out.fmt, 0, true);
    quantize_any(w, v + c0, s, out.fmt, q + c0);
    out.scale_inv[i * nt + t] = 1.0f / s;
  }
}

// Column tiles of one block: rows r0 .. r0 + h - 1 of the output, held in blk [h, D].
inline void emit_col_tiles(int64_t N, int64_t D, int64_t r0, int64_t h, const float* blk, const Fp8Out& out) {
  using namespace fp8_codec;
  constexpr int64_t kCols = 32;
  const int64_t ntr = tiles(N), b = r0 / kFp8Tile;
  float tile[kCols][kFp8Tile];  // [column][row]
  for (int64_t c0 = 0; c0 < D; c0 += kCols) {
    const int64_t w = std::min(kCols, D - c0);
    for (int64_t i = 0; i < h; ++i)
      for (int64_t j = 0; j < w; ++j) tile[j][i] = blk[i * D + c0 + j];
    for (int64_t j = 0; j < w; ++j) {
      const float s = fp8_scale_for(amax_run(h, tile[j]), out.fmt, 0, true);
      quantize_any(h, tile[j], s, out.fmt, out.cols_t + (c0 + j) * N + r0);
      out.cols_scale_inv[(c0 + j) * ntr + b] = 1.0f / s;
    }
  }
}
}  // namespace fp8_emit_detail

template <class RowFn>
void emit_fp8_rows(int64_t N, int64_t D, const Fp8Out& out, RowFn&& row) {
  using namespace fp8_emit_detail;
  fp8_codec::check_format(out.fmt);
  TESSEL_CHECK(out.tiles || !out.cols_t, "FP8 column tiles come with row tiles (block scaling)");
  float m = 0.0f;
#pragma omp parallel
  {
    float my_m = 0.0f;
    if (!out.cols_t) {
      std::vector<float> buf(static_cast<size_t>(D));
#pragma omp for schedule(static)
      for (int64_t i = 0; i < N; ++i) {
        row(i, buf.data());
        emit_row(i, D, buf.data(), out, my_m);
      }
    } else {
      std::vector<float> blk(static_cast<size_t>(kFp8Tile * D));
#pragma omp for schedule(static)
      for (int64_t r0 = 0; r0 < N; r0 += kFp8Tile) {
        const int64_t h = std::min(kFp8Tile, N - r0);
        for (int64_t i = 0; i < h; ++i) {
          row(r0 + i, blk.data() + i * D);
          emit_row(r0 + i, D, blk.data() + i * D, out, my_m);
        }
        emit_col_tiles(N, D, r0, h, blk.data(), out);
      }
    }
#pragma omp critical
    m = nan_max(m, my_m);
  }
  if (out.amax) *out.amax = m;
}

}  // namespace tessel::kernels
