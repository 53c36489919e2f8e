#include "tessel/kernels/fp8_gemm.h"

#include "tessel/core/check.h"
#include "tessel/core/profiler.h"
#include "tessel/kernels/fp8.h"
#include "tessel/kernels/gemm.h"
#include "tessel/kernels/workspace.h"

namespace tessel::kernels {

namespace {

void decode_into(const Fp8Tensor& t, const Tensor& out) {
  ProfileScope prof("fp8_decode");
  const auto* q = static_cast<const uint8_t*>(t.data.raw());
  switch (t.scaling) {
    case Fp8Scaling::tensor: fp8_dequantize(t.data.numel(), q, t.format(), 1.0f, out.data<bf16>()); break;
    case Fp8Scaling::row_tiles:
      fp8_dequantize_row_tiles(t.rows(), t.cols(), q, t.format(), t.scale_inv.data<float>(), out.data<bf16>());
      break;
    case Fp8Scaling::blocks:
      fp8_dequantize_blocks(t.rows(), t.cols(), q, t.format(), t.scale_inv.data<float>(), out.data<bf16>());
      break;
  }
}

}  // namespace

Tensor fp8_decode_operand(const Fp8Tensor& t) {
  Tensor out = Tensor::empty({t.rows(), t.cols()}, DType::bf16, Device::cpu);
  decode_into(t, out);
  return out;
}

std::vector<Tensor> fp8_gemm_emulation_workspace(const Fp8Tensor& a, bool trans_a, const Fp8Tensor& b, bool trans_b,
                                                 const Tensor& c, bool accumulate, int64_t M, int64_t N, int64_t K) {
  // In fp8_gemm_emulated's order (kernel_workspace checks that the two stay in step).
  MemoryCategoryScope scratch(MemoryCategory::workspace);
  std::vector<Tensor> held;
  const Device d = c.device();
  held.push_back(Tensor::empty({a.rows(), a.cols()}, DType::bf16, d));
  held.push_back(Tensor::empty({b.rows(), b.cols()}, DType::bf16, d));
  if (a.scaling == Fp8Scaling::tensor && accumulate) held.push_back(Tensor::empty(c.shape(), DType::f32, d));
  // The decoded operands are dense: leading dimensions their stored widths; c's row stride as given.
  for (Tensor& t : allocate_like_cpu_gemm(gemm_cpu_workspace(M, N, K, DType::bf16, trans_a, a.cols(), trans_b, b.cols(),
                                                             c.stride(0), a.scaling != Fp8Scaling::tensor && accumulate, false),
                                          d))
    held.push_back(std::move(t));
  return held;
}

void fp8_gemm_emulated(const Fp8Tensor& a, bool trans_a, const Fp8Tensor& b, bool trans_b, const Tensor& c,
                       bool accumulate, int64_t M, int64_t N, int64_t K) {
  const DeviceAccessScope on_device;  // a kernel (inside its dispatch point: nothing to do)
  const Tensor ad = kernel_workspace({a.rows(), a.cols()}, DType::bf16);
  decode_into(a, ad);
  const Tensor bd = kernel_workspace({b.rows(), b.cols()}, DType::bf16);
  decode_into(b, bd);
  const GemmOperand ga{ad.raw(), ad.stride(0), trans_a}, gb{bd.raw(), bd.stride(0), trans_b};
  if (a.scaling != Fp8Scaling::tensor) {
    gemm(M, N, K, DType::bf16, ga, gb, c.data<float>(), c.stride(0), accumulate);
    return;
  }
  // Per-tensor scales: applied to the fp32 result.
  const float alpha = a.scale_inv.data<float>()[0] * b.scale_inv.data<float>()[0];
  Tensor prod = accumulate ? kernel_workspace(c.shape(), DType::f32) : c;
  gemm(M, N, K, DType::bf16, ga, gb, prod.data<float>(), prod.stride(0), false);
  float* p = prod.data<float>();
  float* out = c.data<float>();
  const int64_t n = c.numel();
  if (accumulate) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] += alpha * p[i];
  } else {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] *= alpha;
  }
}

}  // namespace tessel::kernels
