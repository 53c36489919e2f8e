// GEMM (oneDNN) against a naive double GEMM: every transpose combination, accumulate on/off, bias on/off,
// f32 and bf16 operands, odd M/N/K, and operands that are sub-blocks of bigger matrices (leading
// dimension larger than the width, data pointer not at the start of the buffer).
#include <gtest/gtest.h>

#include <cstdlib>
#include <tuple>
#include <vector>

#include "support/host_access.h"
#include "kernels/reference.h"
#include "tessel/core/tensor.h"
#include "tessel/kernels/gemm.h"

namespace tessel {
namespace {

using kernels::GemmOperand;
using testref::Rand;

struct Mnk {
  int64_t M, N, K;
};
const Mnk kShapes[] = {{1, 1, 1},    {3, 17, 5},   {17, 3, 63},   {64, 64, 64}, {65, 63, 17},
                       {130, 65, 64}, {1, 130, 65}, {130, 1, 3},  {63, 130, 130}, {7, 9, 1}};

// A row-major matrix of `rows x cols` stored inside a bigger buffer: ld = cols + 5, starting at row 2,
// column 3, the rest filled with junk the GEMM must not read into the result.
template <class T>
struct SubMatrix {
  SubMatrix(int64_t rows, int64_t cols, Rand& rng) : rows(rows), cols(cols), ld(cols + 5) {
    buf.resize(size_t((rows + 3) * ld));
    for (auto& x : buf) testref::store_d(&x, 1e3);  // junk: any read of it ruins the result
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) testref::store_d(at(i, j), rng.normal());
  }
  T* data() { return buf.data() + 2 * ld + 3; }
  T* at(int64_t i, int64_t j) { return data() + i * ld + j; }
  // Dense double copy with the same leading dimension (what the reference reads).
  std::vector<double> as_double() {
    std::vector<double> d(size_t(rows * ld), 0.0);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) d[size_t(i * ld + j)] = testref::to_d(*at(i, j));
    return d;
  }
  int64_t rows, cols, ld;
  std::vector<T> buf;
};

enum class Dt { f32, bf16 };

class GemmTest : public ::testing::TestWithParam<std::tuple<Dt, bool, bool, int>> {};

template <class T>
void run_gemm_case(bool ta, bool tb, const Mnk& s, uint64_t seed) {
  const DType dt = dtype_of<T>();
  for (int variant = 0; variant < 4; ++variant) {
    const bool accumulate = variant & 1, with_bias = variant & 2;
    SCOPED_TRACE(::testing::Message() << "M=" << s.M << " N=" << s.N << " K=" << s.K << " transA=" << ta
                                      << " transB=" << tb << " accumulate=" << accumulate << " bias=" << with_bias);
    Rand rng(seed * 7 + uint64_t(variant));
    SubMatrix<T> A(ta ? s.K : s.M, ta ? s.M : s.K, rng);
    SubMatrix<T> B(tb ? s.N : s.K, tb ? s.K : s.N, rng);
    const int64_t ldc = s.N + 4;
    constexpr float kSentinel = -777.25f;
    std::vector<float> C(size_t(s.M * ldc), kSentinel);
    for (int64_t i = 0; i < s.M; ++i)
      for (int64_t j = 0; j < s.N; ++j) C[size_t(i * ldc + j)] = float(rng.normal());
    std::vector<float> bias = rng.normals(size_t(s.N));

    const std::vector<double> Ad = A.as_double(), Bd = B.as_double();
    std::vector<double> Cref = testref::to_double(C), bias_d = testref::to_double(bias);
    testref::gemm(s.M, s.N, s.K, Ad.data(), A.ld, ta, Bd.data(), B.ld, tb, Cref.data(), ldc, accumulate,
                  with_bias ? bias_d.data() : nullptr);

    kernels::gemm(s.M, s.N, s.K, dt, GemmOperand{A.data(), A.ld, ta}, GemmOperand{B.data(), B.ld, tb}, C.data(), ldc,
                  accumulate, with_bias ? bias.data() : nullptr);

    std::vector<double> got, ref;
    for (int64_t i = 0; i < s.M; ++i)
      for (int64_t j = 0; j < ldc; ++j) {
        if (j < s.N) {
          got.push_back(C[size_t(i * ldc + j)]);
          ref.push_back(Cref[size_t(i * ldc + j)]);
        } else {
          ASSERT_EQ(C[size_t(i * ldc + j)], kSentinel) << "GEMM wrote outside C at row " << i << " col " << j;
        }
      }
    // The reference multiplies the bf16-rounded operands exactly; what is left is fp32 accumulation
    // error, so the f32 bar applies to the (f32) output for both operand dtypes.
    EXPECT_TRUE(testref::all_close(got, ref, testref::Tol<float>::rel, "C"));
  }
}

TEST_P(GemmTest, MatchesDoubleReference) {
  const auto [dt, ta, tb, si] = GetParam();
  const uint64_t seed = uint64_t(si * 16 + ta * 4 + tb * 2 + (dt == Dt::bf16));
  if (dt == Dt::f32)
    run_gemm_case<float>(ta, tb, kShapes[si], seed);
  else
    run_gemm_case<bf16>(ta, tb, kShapes[si], seed);
}

INSTANTIATE_TEST_SUITE_P(
    Grid, GemmTest,
    ::testing::Combine(::testing::Values(Dt::f32, Dt::bf16), ::testing::Bool(), ::testing::Bool(),
                       ::testing::Range(0, int(std::size(kShapes)))),
    [](const auto& info) {
      const auto& s = kShapes[std::get<3>(info.param)];
      return std::string(std::get<0>(info.param) == Dt::f32 ? "f32" : "bf16") + (std::get<1>(info.param) ? "_At" : "_A") +
             (std::get<2>(info.param) ? "Bt_" : "B_") + std::to_string(s.M) + "x" + std::to_string(s.N) + "x" +
             std::to_string(s.K);
    });

// The same primitive (cached by signature) must give correct results on new data.
TEST(Gemm, CachedPrimitiveReusedWithNewData) {
  for (int rep = 0; rep < 3; ++rep) {
    SCOPED_TRACE(rep);
    run_gemm_case<float>(false, true, {17, 33, 65}, 1000 + uint64_t(rep));
  }
}

TEST(Gemm, TensorMatmulChecksShapesAndComputes) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  Rand rng(5);
  Tensor a = Tensor::empty({3, 5}, DType::f32), b = Tensor::empty({4, 5}, DType::f32),
         c = Tensor::zeros({3, 4}, DType::f32);
  for (int64_t i = 0; i < 15; ++i) a.data<float>()[i] = float(rng.normal());
  for (int64_t i = 0; i < 20; ++i) b.data<float>()[i] = float(rng.normal());
  kernels::matmul(a, false, b, true, c, false);  // [3,5] @ [5,4]
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j) {
      double s = 0;
      for (int64_t k = 0; k < 5; ++k) s += double(a.data<float>()[i * 5 + k]) * double(b.data<float>()[j * 5 + k]);
      EXPECT_NEAR(c.data<float>()[i * 4 + j], s, 1e-5 * (1 + std::fabs(s)));
    }
  EXPECT_THROW(kernels::matmul(a, false, b, false, c, false), Error);  // [3,5] @ [4,5]: K mismatch
  Tensor c_bad = Tensor::zeros({4, 3}, DType::f32);
  EXPECT_THROW(kernels::matmul(a, false, b, true, c_bad, false), Error);
  Tensor b16 = b.to(DType::bf16);
  EXPECT_THROW(kernels::matmul(a, false, b16, true, c, false), Error);  // mixed operand dtypes
}

// K = 0 is an empty sum: C = bias (+ C). (M = 0 or N = 0 are no-ops.) Run in a child process so that a
// crash fails this test instead of aborting the whole binary.
[[noreturn]] void gemm_k0_child() {
  std::vector<float> a(4, 1.0f), b(4, 1.0f), c(9, 1.0f), bias = {1, 2, 3};
  kernels::gemm(3, 3, 0, DType::f32, {a.data(), 1, false}, {b.data(), 3, false}, c.data(), 3, true, bias.data());
  bool ok = true;
  for (int i = 0; i < 9; ++i) ok = ok && c[size_t(i)] == 1.0f + bias[size_t(i % 3)];
  kernels::gemm(3, 3, 0, DType::f32, {a.data(), 1, false}, {b.data(), 3, false}, c.data(), 3, false, nullptr);
  for (int i = 0; i < 9; ++i) ok = ok && c[size_t(i)] == 0.0f;
  std::exit(ok ? 0 : 1);
}

TEST(Gemm, EmptyInnerDimensionGivesBias) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(gemm_k0_child(), ::testing::ExitedWithCode(0), "") << "gemm with K = 0 (exit code 1: wrong values)";
  // M = 0 / N = 0 must not touch C.
  std::vector<float> a(4, 1.0f), b(4, 1.0f), c(4, 7.0f);
  kernels::gemm(0, 2, 2, DType::f32, {a.data(), 2, false}, {b.data(), 2, false}, c.data(), 2, false);
  kernels::gemm(2, 0, 2, DType::f32, {a.data(), 2, false}, {b.data(), 2, false}, c.data(), 2, false);
  for (float x : c) EXPECT_EQ(x, 7.0f);
}

TEST(Gemm, UnsupportedOperandDtypeThrows) {
  std::vector<uint8_t> a(16), b(16);
  std::vector<float> c(16);
  EXPECT_THROW(kernels::gemm(4, 4, 4, DType::e4m3, {a.data(), 4, false}, {b.data(), 4, false}, c.data(), 4, false),
               Error);
}

}  // namespace
}  // namespace tessel
