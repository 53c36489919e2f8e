#pragma once
// Fp8Tensor: a quantised 2-D operand as an FP8 GEMM consumes it, and the GEMM on it.
//   data      [R, C] FP8 codes (dtype e4m3 or e5m2), row-major
//   scale_inv f32: [1] (per tensor), [R, ceil(C/128)] (1 x 128 row tiles) or
//             [ceil(R/128), ceil(C/128)] (128 x 128 blocks)
// This is the layout cuBLASLt takes (A/B pointers plus scale-inverse pointers, per-tensor or
// VEC128 / BLK128x128 scale modes), so a GPU backend can pass it as it is.
//
// On the CPU the GEMM is emulated exactly (REFERENCE.md): operands are decoded to bf16 (every FP8
// value is a bf16 value), multiplied by oneDNN with fp32 accumulation, and the scales applied in fp32:
// per tensor to the output, per tile / block inside the decode (only power-of-two scales, so the
// decoded products stay exact). What is computed equals an FP8 tensor-core GEMM with fp32
// accumulation, up to summation order.
#include <vector>

#include "tessel/core/tensor.h"

namespace tessel::kernels {

enum class Fp8Scaling { tensor, row_tiles, blocks };

struct Fp8Tensor {
  Tensor data;
  Tensor scale_inv;
  Fp8Scaling scaling = Fp8Scaling::tensor;
  int64_t rows() const { return data.size(0); }
  int64_t cols() const { return data.size(1); }
  DType format() const { return data.dtype(); }
  size_t nbytes() const { return data.nbytes() + scale_inv.nbytes(); }
};

// The dispatch point (kernels/fp8_gemm.cpp): c [M, N] f32 = op(a) @ op(b) (+ c when accumulate).
// Row tiles must lie along K (the contraction): an untransposed a or a transposed b. Blocks may be
// used either way. One op record "fp8_gemm" (2 M N K FLOPs) on every device.
void fp8_gemm(const Fp8Tensor& a, bool trans_a, const Fp8Tensor& b, bool trans_b, const Tensor& c, bool accumulate);

// The cpu emulation (kernels/cpu/fp8_gemm.cpp) of a checked call, and the scratch it allocates (the
// operands decoded to bf16, a product buffer for per-tensor scales with accumulate, then the bf16
// GEMM's own: gemm_cpu_workspace), which the meta device allocates alike.
void fp8_gemm_emulated(const Fp8Tensor& a, bool trans_a, const Fp8Tensor& b, bool trans_b, const Tensor& c,
                       bool accumulate, int64_t M, int64_t N, int64_t K);
// Allocated on c's device, in the order fp8_gemm_emulated asks kernel_workspace() for it.
std::vector<Tensor> fp8_gemm_emulation_workspace(const Fp8Tensor& a, bool trans_a, const Fp8Tensor& b, bool trans_b,
                                                 const Tensor& c, bool accumulate, int64_t M, int64_t N, int64_t K);

// The bf16 tensor an Fp8Tensor stands for (tiles and blocks with their scales; per-tensor data
// decoded without its scale, which fp8_gemm applies to the output).
Tensor fp8_decode_operand(const Fp8Tensor& t);

}  // namespace tessel::kernels
