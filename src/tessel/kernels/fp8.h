#pragma once
// FP8 quantisation kernels (OCP E4M3 / E5M2; REFERENCE.md "FP8"). Training casts round to nearest
// even and saturate to the largest finite value; NaN stays NaN. A quantised value q of x under scale s
// is q = fp8(x * s); its dequantised value is q * scale_inv with scale_inv = 1 / s.
//
// Three scaling granularities (TransformerEngine / DeepSeek-V3):
//   per tensor       one scale for the whole tensor (delayed and current scaling)
//   1 x 128 tiles    one scale per 128 consecutive elements of a row (activations, gradients); the
//                    column form quantises 128 consecutive rows of a column and writes the result
//                    transposed (cast-transpose: the wgrad GEMM's operand, K = tokens)
//   128 x 128 blocks one scale per block (weights)
// Tiles at the edges are partial. scale_inv arrays are row-major [rows, tiles per row].
#include <cstdint>

#include "tessel/core/dtype.h"

namespace tessel::kernels {

inline constexpr int64_t kFp8Tile = 128;

float fp8_max(DType fmt);  // 448 (e4m3) or 57344 (e5m2); throws for other dtypes
uint8_t fp8_encode(float x, DType fmt);
float fp8_decode(uint8_t q, DType fmt);

// The scale that maps amax to the format's largest value, divided by 2^margin, rounded down to a
// power of two when pow2. 1 when amax is 0 or not finite (nothing to scale; keeps old values sane).
float fp8_scale_for(float amax, DType fmt, int margin, bool pow2);

template <class T>
float amax(int64_t n, const T* x);  // max |x|, NaN-propagating (NaN in -> NaN out)

// Per tensor: out[i] = fp8(x[i] * scale).
template <class T>
void fp8_quantize(int64_t n, const T* x, float scale, DType fmt, uint8_t* out);

// 1 x 128 row tiles of x [R, C] (leading dimension ldx): out [R, C], scale_inv [R, ceil(C/128)].
template <class T>
void fp8_quantize_row_tiles(int64_t R, int64_t C, const T* x, int64_t ldx, DType fmt, bool pow2, uint8_t* out,
                            float* scale_inv);
// 128 x 1 column tiles of x [R, C], written transposed: out [C, R], scale_inv [C, ceil(R/128)].
template <class T>
void fp8_quantize_col_tiles_transposed(int64_t R, int64_t C, const T* x, int64_t ldx, DType fmt, bool pow2,
                                       uint8_t* out, float* scale_inv);
// 128 x 128 blocks of x [R, C] (contiguous): out [R, C], scale_inv [ceil(R/128), ceil(C/128)].
template <class T>  // float or bf16 (a bf16 weight quantised as it is: its widening is exact)
void fp8_quantize_blocks(int64_t R, int64_t C, const T* x, DType fmt, bool pow2, uint8_t* out, float* scale_inv);

// Dequantisation to bf16 (exact when every scale_inv is a power of two, or 1: FP8 values are bf16
// values). Per tensor with scale_inv; row tiles [R, C]; blocks [R, C].
void fp8_dequantize(int64_t n, const uint8_t* q, DType fmt, float scale_inv, bf16* out);
void fp8_dequantize_row_tiles(int64_t R, int64_t C, const uint8_t* q, DType fmt, const float* scale_inv, bf16* out);
void fp8_dequantize_blocks(int64_t R, int64_t C, const uint8_t* q, DType fmt, const float* scale_inv, bf16* out);

}  // namespace tessel::kernels
