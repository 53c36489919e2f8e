// The GEMM dispatch point: device-neutral checks and the op record, then the device's kernel.
#include "tessel/kernels/gemm.h"

#include <algorithm>

#include "tessel/kernels/launch.h"
#include "tessel/kernels/op_log.h"
#include "tessel/kernels/workspace.h"

namespace tessel::kernels {

void matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, bool accumulate,
            const Tensor& bias) {
  TESSEL_CHECK(a.dim() == 2 && b.dim() == 2 && c.dim() == 2, "matmul needs 2-D tensors, got {} {} {}", a.str(),
               b.str(), c.str());
  TESSEL_CHECK(a.dtype() == b.dtype(), "matmul operands differ in dtype: {} vs {}", a.str(), b.str());
  TESSEL_CHECK(c.dtype() == DType::f32, "matmul output must be f32, got {}", c.str());
  TESSEL_CHECK(a.stride(1) == 1 && b.stride(1) == 1 && c.stride(1) == 1, "matmul needs row-major operands");
  const int64_t M = trans_a ? a.size(1) : a.size(0), K = trans_a ? a.size(0) : a.size(1);
  const int64_t Kb = trans_b ? b.size(1) : b.size(0), N = trans_b ? b.size(0) : b.size(1);
  TESSEL_CHECK(K == Kb && c.size(0) == M && c.size(1) == N, "matmul shape mismatch: op({}) @ op({}) -> {}", a.str(),
               b.str(), c.str());
  if (bias.defined())
    TESSEL_CHECK(bias.dtype() == DType::f32 && bias.numel() == N && bias.is_contiguous(),
                 "matmul bias must be a contiguous f32 tensor of {} elements, got {}", N, bias.str());
  const Device device = common_device("matmul", {&a, &b, &c, &bias});
  if (op_log().enabled()) {
    OpRecord r{"gemm", {{a.shape(), b.shape(), c.shape()}, {a.dtype(), b.dtype(), c.dtype()}}, 2.0 * double(M) * double(N) * double(K),
               int64_t(a.nbytes() + b.nbytes()) + (accumulate ? int64_t(c.nbytes()) : 0), int64_t(c.nbytes()), {}, -1, gemm_variant(trans_a, trans_b, accumulate)};
    if (bias.defined()) {
      r.operands.insert(2, bias.shape(), bias.dtype());
      r.bytes_read += int64_t(bias.nbytes());
    }
    op_log().add(std::move(r));
  }
  // The cpu kernel's workspace, allocated here, in its order, and freed when the call returns (on meta
  // that is all there is; on the cpu the memory goes back to the pool after the kernel has run).
  const std::vector<Tensor> workspace = allocate_like_cpu_gemm(
      gemm_cpu_workspace(M, N, K, a.dtype(), trans_a, a.stride(0), trans_b, b.stride(0), c.stride(0), accumulate,
                         bias.defined()),
      device);
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [ws = borrow_all(workspace), M, N, K, trans_a, trans_b, accumulate](const Tensor& a, const Tensor& b, const Tensor& c,
                                                                          const Tensor& bias) {
        const WorkspaceSupplyScope supply(ws);
        gemm(M, N, K, a.dtype(), {a.raw(), a.stride(0), trans_a}, {b.raw(), b.stride(0), trans_b}, c.data<float>(),
             c.stride(0), accumulate, bias.defined() ? bias.data<float>() : nullptr);
      },
      a, b, c, bias);
}

std::vector<Tensor> allocate_like_cpu_gemm(const GemmWorkspace& w, Device device) {
  MemoryCategoryScope scratch(MemoryCategory::workspace);
  std::vector<Tensor> held;
  for (const GemmScratch& c : w.copies) held.push_back(Tensor::empty(c.shape, c.dtype, device));
  size_t scratch_bytes = 0;  // one scratchpad for all the primitives, as gemm() runs them
  for (size_t bytes : w.scratchpads) scratch_bytes = std::max(scratch_bytes, bytes);
  if (scratch_bytes) held.push_back(Tensor::empty(gemm_scratchpad_shape(scratch_bytes), DType::i32, device));
  return held;
}

Shape gemm_scratchpad_shape(size_t bytes) { return {int64_t((bytes + 3) / 4)}; }

}  // namespace tessel::kernels
