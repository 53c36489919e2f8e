#include "tessel/kernels/fp8_gemm.h"

#include "tessel/core/check.h"
#include "tessel/core/profiler.h"
#include "tessel/kernels/fp8.h"
#include "tessel/kernels/gemm.h"

namespace tessel::kernels {

Tensor fp8_decode_operand(const Fp8Tensor& t) {
  ProfileScope prof("fp8_decode");
  Tensor out = Tensor::empty({t.rows(), t.cols()}, DType::bf16);
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
  return out;
}

void fp8_gemm(const Fp8Tensor& a, bool trans_a, const Fp8Tensor& b, bool trans_b, const Tensor& c, bool accumulate) {
  TESSEL_CHECK(!(a.scaling == Fp8Scaling::row_tiles && trans_a) && !(b.scaling == Fp8Scaling::row_tiles && !trans_b),
               "fp8_gemm: 1 x 128 tiles must lie along the contraction dimension");
  TESSEL_CHECK((a.scaling == Fp8Scaling::tensor) == (b.scaling == Fp8Scaling::tensor),
               "fp8_gemm: per-tensor and tiled operands cannot be mixed");
  const Tensor ad = fp8_decode_operand(a), bd = fp8_decode_operand(b);
  if (a.scaling != Fp8Scaling::tensor) {
    matmul(ad, trans_a, bd, trans_b, c, accumulate);
    return;
  }
  // Per-tensor scales: applied to the fp32 result.
  const float alpha = a.scale_inv.data<float>()[0] * b.scale_inv.data<float>()[0];
  Tensor prod = accumulate ? Tensor::empty(c.shape(), DType::f32) : c;
  matmul(ad, trans_a, bd, trans_b, prod, false);
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
