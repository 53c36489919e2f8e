// Kernel dispatch by device: the same call checks shapes on every device, is recorded in the op log,
// computes on the cpu and does nothing on meta; operands on two devices are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "support/host_access.h"
#include "support/error_of.h"
#include "tessel/kernels/act.h"
#include "tessel/kernels/cast.h"
#include "tessel/kernels/embedding.h"
#include "tessel/kernels/gemm.h"
#include "tessel/kernels/norm.h"
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
  EXPECT_EQ(recs[0].operands.shapes(), (std::vector<Shape>{{6, 5}, {7, 6}, {7}, {5, 7}}));
  EXPECT_EQ(recs[0].operands.dtype(2), DType::f32);  // the bias, inserted before c
  EXPECT_EQ(recs[0].operands.dtype(3), DType::f32);
  EXPECT_EQ(recs[0].operands.dtype(1), DType::bf16);
  // a and b in bf16, the bias, and c read back because the product accumulates into it.
  EXPECT_EQ(recs[0].bytes_read, 30 * 2 + 42 * 2 + 7 * 4 + 35 * 4);
  EXPECT_EQ(recs[0].bytes_written, 35 * 4);
  EXPECT_EQ(testing::error_of([&] { kernels::matmul(a, false, b, true, c, false); }),
            "matmul shape mismatch: op(bf16[6, 5] on meta) @ op(bf16[7, 6] on meta) -> f32[5, 7] on meta");
}

TEST(KernelDispatch, CpuRecordsTheSameCallItComputes) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
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

TEST(KernelDispatch, NormTensorFormComputesTheRawKernelOnCpuAndRecordsOnMeta) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  const int64_t N = 3, D = 8;
  Tensor x = Tensor::empty({N, D}, DType::f32), w = Tensor::empty({D}, DType::f32);
  for (int64_t i = 0; i < N * D; ++i) x.data<float>()[i] = float(i % 7) - 3.0f;
  for (int64_t i = 0; i < D; ++i) w.data<float>()[i] = 0.5f + 0.1f * float(i);
  Tensor y = Tensor::empty({N, D}, DType::f32), rstd = Tensor::empty({N}, DType::f32);
  kernels::norm_forward(kernels::NormKind::rms, x, Tensor(), x, w, Tensor(), 1e-5f, y, Tensor(), rstd);
  std::vector<float> y_raw(static_cast<size_t>(N * D)), rstd_raw(static_cast<size_t>(N));
  kernels::rmsnorm_fwd(N, D, x.data<float>(), nullptr, x.data<float>(), w.data<float>(), 1e-5f, y_raw.data(),
                       rstd_raw.data());
  for (int64_t i = 0; i < N * D; ++i) EXPECT_EQ(y.data<float>()[i], y_raw[size_t(i)]);
  // Row 0 by hand: x = -3..3 then -3; rms over 8 values.
  double ss = 0;
  for (int64_t j = 0; j < D; ++j) ss += double(x.data<float>()[j]) * x.data<float>()[j];
  EXPECT_NEAR(rstd.data<float>()[0], 1.0 / std::sqrt(ss / D + 1e-5), 1e-6);

  LogOn log;
  const auto meta = [](const Shape& s, DType t = DType::f32) { return Tensor::empty(s, t, Device::meta); };
  kernels::norm_forward(kernels::NormKind::layer, meta({N, D}), meta({N, D}), meta({N, D}), meta({D}), meta({D}), 1e-5f,
                        meta({N, D}, DType::bf16), meta({N}), meta({N}));
  const auto recs = kernels::op_log().records();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].op, "layernorm_fwd");
  EXPECT_EQ(recs[0].bytes_read, (2 * N * D + 2 * D) * 4);              // r_in, delta, w, b
  EXPECT_EQ(recs[0].bytes_written, N * D * 4 + N * D * 2 + 2 * N * 4);  // r_out, y (bf16), mean, rstd
  EXPECT_EQ(tessel::testing::error_of([&] {
              kernels::norm_forward(kernels::NormKind::rms, meta({N, D}), Tensor(), meta({N, D}), meta({D + 1}), Tensor(),
                                    1e-5f, meta({N, D}), Tensor(), meta({N}));
            }),
            "rmsnorm_fwd: weight must be a contiguous f32 [8], got f32[9] on meta");
}

TEST(KernelDispatch, ActivationTensorFormChecksTheSwigluHalvesAndRecords) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  LogOn log;
  const Tensor gu = Tensor::empty({4, 6}, DType::f32, Device::meta), out = Tensor::empty({4, 3}, DType::bf16, Device::meta);
  kernels::activation_forward(kernels::Activation::swiglu, gu, out);
  const auto recs = kernels::op_log().records();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].bytes_read, 4 * 6 * 4);
  EXPECT_EQ(recs[0].bytes_written, 4 * 3 * 2);
  EXPECT_EQ(tessel::testing::error_of([&] {
              kernels::activation_forward(kernels::Activation::swiglu, gu, Tensor::empty({4, 6}, DType::f32, Device::meta));
            }),
            "swiglu_fwd: output must be a contiguous f32 or bf16 [4, 3], got f32[4, 6] on meta");
  // On the cpu: silu(g) * u against the formula.
  Tensor h = Tensor::empty({1, 2}, DType::f32), a = Tensor::empty({1, 1}, DType::f32);
  h.data<float>()[0] = 1.5f;
  h.data<float>()[1] = -2.0f;
  kernels::activation_forward(kernels::Activation::swiglu, h, a);
  EXPECT_NEAR(a.data<float>()[0], 1.5 / (1 + std::exp(-1.5)) * -2.0, 1e-5);
}

TEST(KernelDispatch, EmbeddingTensorFormLooksRowsUpOnCpuAndRecordsOnMeta) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  Tensor tok = Tensor::empty({3}, DType::i64), W = Tensor::empty({5, 2}, DType::f32), out = Tensor::empty({3, 2}, DType::f32);
  for (int64_t i = 0; i < 10; ++i) W.data<float>()[i] = float(i);
  tok.data<int64_t>()[0] = 4;
  tok.data<int64_t>()[1] = 0;
  tok.data<int64_t>()[2] = 2;
  kernels::embedding_forward(tok, W, Tensor(), 3, out);
  EXPECT_EQ(out.data<float>()[0], 8.0f);  // row 4
  EXPECT_EQ(out.data<float>()[5], 5.0f);  // row 2, column 1
  LogOn log;
  const auto meta = [](const Shape& s, DType t = DType::f32) { return Tensor::empty(s, t, Device::meta); };
  kernels::embedding_forward(meta({2, 4}, DType::i64), meta({100, 16}), meta({4, 16}), 4, meta({8, 16}));
  const auto recs = kernels::op_log().records();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].bytes_read, 8 * 8 + 2 * 8 * 16 * 4);  // the ids, one table row and one position row each
  EXPECT_EQ(recs[0].bytes_written, 8 * 16 * 4);
  EXPECT_EQ(tessel::testing::error_of([&] {
              kernels::embedding_forward(meta({8}, DType::i64), meta({100, 16}), Tensor(), 4, meta({8, 15}));
            }),
            "embedding_fwd: rows must be a contiguous f32 [8, 16], got f32[8, 15] on meta");
}

// precision.fp32_embedding off: the lookups read the table's bf16 copy and widen its rows to f32. The
// table's values are multiples of 1/8 below 32, exact in bf16, so each output row must be the fp32
// table's row to the bit; a kernel reading the bf16 storage as floats would produce other values.
TEST(KernelDispatch, EmbeddingLookupsReadABf16TableAndWidenItsRows) {
  const tessel::testing::HostAccess host;
  const int64_t V = 6, D = 5, N = 4, T = 2;
  Tensor W32 = Tensor::empty({V, D}, DType::f32), W16 = Tensor::empty({V, D}, DType::bf16);
  Tensor pos = Tensor::empty({T, D}, DType::f32), tok = Tensor::empty({N}, DType::i64);
  for (int64_t i = 0; i < V * D; ++i) {
    W32.data<float>()[i] = float((i * 37) % 251 - 125) / 8.0f;
    W16.data<bf16>()[i] = bf16(W32.data<float>()[i]);
  }
  for (int64_t i = 0; i < T * D; ++i) pos.data<float>()[i] = 0.25f * float(i);
  const int64_t ids[N] = {5, 0, 3, 5};
  for (int64_t n = 0; n < N; ++n) tok.data<int64_t>()[n] = ids[n];
  for (const bool with_positions : {false, true}) {
    SCOPED_TRACE(with_positions ? "with positions" : "tokens only");
    const Tensor p = with_positions ? pos : Tensor();
    Tensor want = Tensor::empty({N, D}, DType::f32), got = Tensor::empty({N, D}, DType::f32);
    kernels::embedding_forward(tok, W32, p, T, want);
    kernels::embedding_forward(tok, W16, p, T, got);
    for (int64_t i = 0; i < N * D; ++i) ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]) << i;
  }
  // The vocabulary slice [2, 5) of the table: rows outside it are zero.
  Tensor want = Tensor::empty({N, D}, DType::f32), got = Tensor::empty({N, D}, DType::f32);
  kernels::embedding_forward_slice(tok, W32.slice(0, 2, 5), 2, want);
  kernels::embedding_forward_slice(tok, W16.slice(0, 2, 5), 2, got);
  for (int64_t i = 0; i < N * D; ++i) ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]) << i;
  EXPECT_EQ(got.data<float>()[2 * D + 1], W32.data<float>()[3 * D + 1]);  // token 3 is in the slice
  EXPECT_EQ(got.data<float>()[0], 0.0f);                                   // token 5 is not
  // A table in another narrow format, and a bf16 table where only f32 is read, are refused by name.
  const auto meta = [](const Shape& s, DType t = DType::f32) { return Tensor::empty(s, t, Device::meta); };
  EXPECT_EQ(tessel::testing::error_of([&] {
              kernels::embedding_forward(meta({8}, DType::i64), meta({100, 16}, DType::f16), Tensor(), 4, meta({8, 16}));
            }),
            "embedding_fwd: the table must be a contiguous f32 or bf16 [V, D], got f16[100, 16] on meta");
  EXPECT_EQ(tessel::testing::error_of([&] {
              kernels::embedding_backward(meta({8}, DType::i64), meta({8, 16}), meta({100, 16}, DType::bf16), Tensor(), 4);
            }),
            "embedding_bwd: the table must be a contiguous f32 [V, D], got bf16[100, 16] on meta");
  // On meta the record reads one bf16 row per token.
  LogOn log;
  kernels::embedding_forward(meta({2, 4}, DType::i64), meta({100, 16}, DType::bf16), Tensor(), 4, meta({8, 16}));
  ASSERT_EQ(kernels::op_log().records().size(), 1u);
  EXPECT_EQ(kernels::op_log().records()[0].bytes_read, 8 * 8 + 8 * 16 * 2);
}

TEST(KernelDispatch, CastAddAndBiasHelpersComputeOnCpuAndCheckShapes) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  Tensor y = Tensor::zeros({2, 3}, DType::f32), v = Tensor::empty({3}, DType::f32), acc = Tensor::zeros({3}, DType::f32);
  for (int64_t j = 0; j < 3; ++j) v.data<float>()[j] = float(j + 1);
  kernels::add_row_vector(y, v);  // every row = 1 2 3
  kernels::column_sum_accumulate(y.to(DType::bf16), acc);
  EXPECT_EQ(acc.data<float>()[2], 6.0f);
  Tensor z = Tensor::empty({2, 3}, DType::f32);
  kernels::add(y, y, z);
  EXPECT_EQ(z.data<float>()[4], 4.0f);
  Tensor h = Tensor::empty({2, 3}, DType::bf16);
  kernels::cast(z, h);
  EXPECT_EQ(float(h.data<bf16>()[5]), 6.0f);
  EXPECT_EQ(tessel::testing::error_of([&] { kernels::add(y, v, y); }), "add: shapes f32[2, 3], f32[3] -> f32[2, 3]");
  LogOn log;
  kernels::cast(Tensor::empty({4}, DType::f32, Device::meta), Tensor::empty({4}, DType::bf16, Device::meta));
  ASSERT_EQ(kernels::op_log().records().size(), 1u);
  EXPECT_EQ(kernels::op_log().records()[0].bytes_written, 8);
}

}  // namespace
}  // namespace tessel
