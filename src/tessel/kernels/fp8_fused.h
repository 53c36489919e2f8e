#pragma once
// Fused producers of FP8 GEMM inputs: a normalisation or an MLP activation writes its output straight
// as FP8 codes, with no compute-dtype tensor in between (TransformerEngine's fused LayerNorm / RMSNorm
// and activation casts). The fp32 result is rounded once, to FP8. Two layouts, as fp8.h:
//   per tensor  codes = fp8(value * scale) with a scale known beforehand (delayed scaling); the
//               producer reports the output's amax (max |value|, NaN if any value is NaN)
//   row tiles   power-of-two scales per 1 x 128 tile of each row (block scaling); optionally also the
//               128 x 1 column tiles written transposed (the weight-gradient operand), from the same
//               fp32 values in the same pass (a fused cast-transpose)
// Every output equals the unfused composition: the fp32 kernel (norm.h / act.h) followed by
// fp8_quantize / fp8_quantize_row_tiles / fp8_quantize_col_tiles_transposed on its output.
#include <cstdint>

#include "tessel/core/dtype.h"

namespace tessel::kernels {

// Where a fused producer of an [N, D] output writes it.
struct Fp8Out {
  DType fmt = DType::e4m3;
  bool tiles = false;               // false: per tensor with `scale`; true: power-of-two 1 x 128 row tiles
  uint8_t* data = nullptr;          // [N, D] codes
  float scale = 1.0f;               // per tensor
  float* amax = nullptr;            // per tensor, optional: the output's amax is written here
  float* scale_inv = nullptr;       // row tiles: [N, ceil(D / 128)]
  uint8_t* cols_t = nullptr;        // row tiles, optional: column tiles transposed [D, N]
  float* cols_scale_inv = nullptr;  // with cols_t: [D, ceil(N / 128)]
};

// norm.h's forwards (residual add fused in front) with the normalised output written as FP8.
void rmsnorm_fwd_fp8(int64_t N, int64_t D, const float* r_in, const float* delta, float* r_out, const float* w,
                     float eps, const Fp8Out& y, float* rstd);
void layernorm_fwd_fp8(int64_t N, int64_t D, const float* r_in, const float* delta, float* r_out, const float* w,
                       const float* b, float eps, const Fp8Out& y, float* mean, float* rstd);
// act.h's forwards with FP8 output: SwiGLU gu [N, 2F] -> [N, F]; GeLU x [N, F] -> [N, F].
void swiglu_fwd_fp8(int64_t N, int64_t F, const float* gu, const Fp8Out& out);
void gelu_fwd_fp8(int64_t N, int64_t F, const float* x, const Fp8Out& out);

}  // namespace tessel::kernels
