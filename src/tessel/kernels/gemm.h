#pragma once
// GEMM: C[M,N] (fp32) = op(A)[M,K] @ op(B)[K,N] (+ bias[N]) (+ C when accumulate).
// A and B share one dtype (f32 or bf16); accumulation is fp32 (bf16 on CPUs without bf16 kernels:
// gemm_widens_bf16()). All matrices are row-major with
// leading dimensions, so a transposed operand is the same memory read with swapped strides (no copy):
// dgrad (dY @ W) and wgrad (dY^T @ X) use the forward's buffers as they are.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tessel/core/tensor.h"

namespace tessel::kernels {

struct GemmOperand {
  const void* data;
  int64_t ld;   // leading dimension of the stored (untransposed) matrix
  bool trans;   // true: the stored matrix is op(X)^T
};

void gemm(int64_t M, int64_t N, int64_t K, DType ab_dtype, GemmOperand a, GemmOperand b, float* c, int64_t ldc,
          bool accumulate, const float* bias = nullptr);

// The dispatch point (gemm.cpp): c = op(a) @ op(b) (+ bias) (+ c) for 2-D tensors on one device.
// Shapes and dtypes are checked on every device; the call is recorded in op_log() when it is on;
// cpu runs gemm() below (kernels/cpu/gemm_onednn.cpp); meta computes nothing. A cuda device would
// add its case here, with cuBLASLt behind it. bias: f32[N] or undefined.
void matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, bool accumulate,
            const Tensor& bias = Tensor());

// The workspace gemm() allocates for one call on this cpu: the operand copies it holds for the whole
// call (bf16 widened to fp32 where there are no bf16 kernels, operands with tokens in K zero-padded
// to a size class), then one scratchpad that each matmul primitive uses in turn, the largest they
// need (oneDNN's, given from tessel's allocator). The dispatch point allocates it
// (allocate_like_cpu_gemm) on every device, so a dry run accounts the cpu's workspace byte for byte;
// the scratchpads are asked of oneDNN for the shape.
struct GemmScratch {
  Shape shape;
  DType dtype;
};
struct GemmWorkspace {
  std::vector<GemmScratch> copies;
  std::vector<size_t> scratchpads;  // bytes each primitive needs, in call order
};
GemmWorkspace gemm_cpu_workspace(int64_t M, int64_t N, int64_t K, DType ab_dtype, bool trans_a, int64_t lda,
                                 bool trans_b, int64_t ldb, int64_t ldc, bool accumulate, bool bias);
// Allocates on `device` what the cpu gemm asks kernel_workspace() for (kernels/workspace.h), in its order.
std::vector<Tensor> allocate_like_cpu_gemm(const GemmWorkspace& w, Device device);
// The scratchpad of `bytes` as a workspace tensor: i32 words, bytes rounded up to 4.
Shape gemm_scratchpad_shape(size_t bytes);

// True where oneDNN has no bf16 matmul kernels (no AVX-512, or ONEDNN_MAX_CPU_ISA below AVX512_CORE):
// bf16 operands are then widened to fp32 (exact) and multiplied by the fp32 kernels.
bool gemm_widens_bf16();

// Primitives in the GEMM cache (bounded: see gemm_onednn.cpp).
size_t gemm_cached_primitives();

// The instruction set oneDNN's kernels use on this machine ("avx512_core_amx", "avx512_core_bf16", ...),
// after any ONEDNN_MAX_CPU_ISA cap.
std::string gemm_cpu_isa();

// Measured GEMM throughput of this machine (GFLOP/s) for a square bf16 or f32 problem.
double measure_gemm_gflops(DType dtype, int64_t n, int reps);

}  // namespace tessel::kernels
