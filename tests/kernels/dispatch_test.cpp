// Kernel dispatch by device: the same call checks shapes on every device, is recorded in the op log,
// computes on the cpu and does nothing on meta; operands on two devices are refused.
#include <gtest/gtest.h>

#include "support/error_of.h"
#include "tessel/kernels/gemm.h"
#include "tessel/kernels/op_log.h"

namespace tessel {
namespace {

struct LogOn {
  LogOn() {
    kernels::op_log().clear();
    kernels::op_log().set_enabled(true);
  }
  ~LogOn() {
    kernels::op_log().set_enabled(false);
    kernels::op_log().clear();
  }
};

TEST(KernelDispatch, MetaMatmulChecksShapesRecordsTheCallAndComputesNothing) {
  LogOn log;
  const Tensor a = Tensor::empty({6, 5}, DType::bf16, Device::meta);  // op(a) = a^T: [5, 6]
  const Tensor b = Tensor::empty({7, 6}, DType::bf16, Device::meta);  // op(b) = b^T: [6, 7]
  const Tensor c = Tensor::empty({5, 7}, DType::f32, Device::meta);
  const Tensor bias = Tensor::empty({7}, DType::f32, Device::meta);
  kernels::matmul(a, true, b, true, c, true, bias);
  const auto recs = kernels::op_log().records();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].op, "gemm");
  EXPECT_EQ(recs[0].flops, 2.0 * 5 * 7 * 6);
  EXPECT_EQ(recs[0].shapes, (std::vector<Shape>{{6, 5}, {7, 6}, {7}, {5, 7}}));
  // a and b in bf16, the bias, and c read back because the product accumulates into it.
  EXPECT_EQ(recs[0].bytes_read, 30 * 2 + 42 * 2 + 7 * 4 + 35 * 4);
  EXPECT_EQ(recs[0].bytes_written, 35 * 4);
  EXPECT_EQ(testing::error_of([&] { kernels::matmul(a, false, b, true, c, false); }),
            "matmul shape mismatch: op(bf16[6, 5] on meta) @ op(bf16[7, 6] on meta) -> f32[5, 7] on meta");
}

TEST(KernelDispatch, CpuRecordsTheSameCallItComputes) {
  LogOn log;
  Tensor a = Tensor::zeros({2, 3}, DType::f32), b = Tensor::zeros({3, 4}, DType::f32);
  Tensor c = Tensor::zeros({2, 4}, DType::f32);
  a.fill(1.0);
  b.fill(0.5);
  kernels::matmul(a, false, b, false, c, false);
  EXPECT_EQ(c.data<float>()[7], 1.5f);  // 3 x 1 x 0.5
  const auto totals = kernels::op_log().totals_by_op();
  ASSERT_EQ(totals.count("gemm"), 1u);
  EXPECT_EQ(totals.at("gemm").calls, 1);
  EXPECT_EQ(totals.at("gemm").flops, 2.0 * 2 * 4 * 3);
}

TEST(KernelDispatch, OperandsOnTwoDevicesAreRefused) {
  const Tensor a = Tensor::zeros({2, 3}, DType::f32);
  const Tensor b = Tensor::empty({3, 4}, DType::f32, Device::meta);
  const Tensor c = Tensor::zeros({2, 4}, DType::f32);
  EXPECT_EQ(testing::error_of([&] { kernels::matmul(a, false, b, false, c, false); }),
            "matmul: operands on different devices (f32[2, 3] on cpu, f32[3, 4] on meta, f32[2, 4] on cpu); every "
            "operand of a kernel must be on one device");
}

TEST(KernelDispatch, TheLogIsOffUnlessTurnedOn) {
  kernels::op_log().clear();
  const Tensor a = Tensor::empty({2, 3}, DType::f32, Device::meta), b = Tensor::empty({3, 4}, DType::f32, Device::meta);
  kernels::matmul(a, false, b, false, Tensor::empty({2, 4}, DType::f32, Device::meta), false);
  EXPECT_TRUE(kernels::op_log().records().empty());
}

}  // namespace
}  // namespace tessel
