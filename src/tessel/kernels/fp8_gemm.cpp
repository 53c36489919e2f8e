// The FP8 GEMM's dispatch point: device-neutral checks and the op record, then the device's kernel.
#include "tessel/kernels/fp8_gemm.h"

#include "tessel/kernels/launch.h"
#include "tessel/kernels/op_log.h"
#include "tessel/kernels/workspace.h"

namespace tessel::kernels {

void fp8_gemm(const Fp8Tensor& a, bool trans_a, const Fp8Tensor& b, bool trans_b, const Tensor& c, bool accumulate) {
  TESSEL_CHECK(!(a.scaling == Fp8Scaling::row_tiles && trans_a) && !(b.scaling == Fp8Scaling::row_tiles && !trans_b),
               "fp8_gemm: 1 x 128 tiles must lie along the contraction dimension");
  TESSEL_CHECK((a.scaling == Fp8Scaling::tensor) == (b.scaling == Fp8Scaling::tensor),
               "fp8_gemm: per-tensor and tiled operands cannot be mixed");
  TESSEL_CHECK(a.data.dim() == 2 && b.data.dim() == 2 && c.dim() == 2 && c.dtype() == DType::f32 && c.is_contiguous(),
               "fp8_gemm: 2-D FP8 operands into a contiguous f32 output, got {} {} -> {}", a.data.str(), b.data.str(),
               c.str());
  const int64_t M = trans_a ? a.cols() : a.rows(), K = trans_a ? a.rows() : a.cols();
  const int64_t Kb = trans_b ? b.cols() : b.rows(), N = trans_b ? b.rows() : b.cols();
  TESSEL_CHECK(K == Kb && c.size(0) == M && c.size(1) == N, "fp8_gemm shape mismatch: op({}) @ op({}) -> {}",
               a.data.str(), b.data.str(), c.str());
  const Device device = common_device("fp8_gemm", {&a.data, &a.scale_inv, &b.data, &b.scale_inv, &c});
  if (op_log().enabled())
    op_log().add({"fp8_gemm", {{a.data.shape(), b.data.shape(), c.shape()}, {a.format(), b.format(), c.dtype()}},
                  2.0 * double(M) * double(N) * double(K), int64_t(a.nbytes() + b.nbytes()) +
                  (accumulate ? int64_t(c.nbytes()) : 0), int64_t(c.nbytes()), {}, -1,
                  gemm_variant(trans_a, trans_b, accumulate)});
  // The cpu emulation's scratch, allocated here on every device (kernels/workspace.h).
  const std::vector<Tensor> workspace = fp8_gemm_emulation_workspace(a, trans_a, b, trans_b, c, accumulate, M, N, K);
  if (device == Device::meta) return;
  const Fp8Scaling sa = a.scaling, sb = b.scaling;
  launch_cpu_kernel(
      [ws = borrow_all(workspace), sa, sb, trans_a, trans_b, accumulate, M, N, K](
          const Tensor& a_data, const Tensor& a_scale, const Tensor& b_data, const Tensor& b_scale, const Tensor& c) {
        const WorkspaceSupplyScope supply(ws);
        fp8_gemm_emulated({a_data, a_scale, sa}, trans_a, {b_data, b_scale, sb}, trans_b, c, accumulate, M, N, K);
      },
      a.data, a.scale_inv, b.data, b.scale_inv, c);
}

}  // namespace tessel::kernels
