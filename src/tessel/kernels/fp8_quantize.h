#pragma once
// The FP8 family's dispatch points (kernels/fp8_quantize.cpp): quantisation into Fp8Tensors, the
// fused FP8-writing producers, as tensors on one device (the FP8 GEMM's is fp8_gemm, fp8_gemm.h). The codecs and the cpu
// kernels on raw arrays are kernels/fp8.h, fp8_fused.h and fp8_gemm.h. Values that reach the host
// (an amax, a one-element scale) are the return value: an explicit copy; on meta there is none (0).
#include "tessel/core/tensor.h"
#include "tessel/kernels/fp8_fused.h"
#include "tessel/kernels/fp8_gemm.h"
#include "tessel/kernels/norm.h"

namespace tessel::kernels {

float amax(const Tensor& x);  // max |x| of f32 or bf16 x, copied to the host
// A one-element f32 tensor's value copied to the host (a fused producer's amax).
float read_scalar(const Tensor& x);
// Per tensor: q.data = fp8(x * scale), q.scale_inv = 1 / scale.
void fp8_quantize(const Tensor& x, float scale, const Fp8Tensor& q);
// 1 x 128 row tiles of x [R, C] (q.data [R, C]), 128 x 1 column tiles written transposed (q.data
// [C, R]), 128 x 128 blocks of an f32 weight (q.data [R, C]); power-of-two scales.
void fp8_quantize_row_tiles(const Tensor& x, const Fp8Tensor& q);
void fp8_quantize_col_tiles_transposed(const Tensor& x, const Fp8Tensor& q);
void fp8_quantize_blocks(const Tensor& w, const Fp8Tensor& q);

// norm.h's forward with the normalised output written as FP8 through `y` (whose pointers are the
// device addresses of `y_tensors`: its codes and scales, checked for the device); mean undefined
// for RMSNorm.
void norm_forward_fp8(NormKind kind, const Tensor& r_in, const Tensor& delta, const Tensor& r_out, const Tensor& w,
                      const Tensor& b, float eps, const Fp8Out& y, std::initializer_list<const Tensor*> y_tensors,
                      const Tensor& mean, const Tensor& rstd);
// SwiGLU (gu [N, 2F]) or GeLU (x [N, F]) written as FP8 [N, F] through `out`.
void activation_forward_fp8(bool swiglu, const Tensor& x, int64_t F, const Fp8Out& out,
                            std::initializer_list<const Tensor*> out_tensors);

}  // namespace tessel::kernels
