// The GEMM primitive cache stays bounded when the token dimension changes from call to call (MoE
// experts get a different number of rows each step), and the size-class handling keeps results:
// rows cut into chunks are bit for bit the rows of one exact GEMM (on the AVX-512 kernels; see
// rows_computed_alike_for_any_m), and a zero-padded K is bit for bit the GEMM of explicitly
// zero-extended operands.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/reference.h"
#include "tessel/core/tensor.h"
#include "tessel/kernels/gemm.h"

namespace tessel {
namespace {

using kernels::GemmOperand;

template <class T>
std::vector<T> random_matrix(int64_t n, uint64_t seed) {
  testref::Rand rng(seed);
  std::vector<T> v(static_cast<size_t>(n));
  for (auto& x : v) testref::store_d(&x, rng.normal());
  return v;
}

TEST(GemmSizeClasses, CacheStaysBoundedOverEveryTokenCount) {
  // Every row count 1..600 in the forward layout (tokens in M) and every K 1..600 in the
  // weight-gradient layout (tokens in K). Exact-shape caching made 1200 primitives here.
  const int64_t n = 8, max_tokens = 600;
  const auto x = random_matrix<float>(max_tokens * n, 1), w = random_matrix<float>(n * n, 2);
  std::vector<float> c(size_t(max_tokens * n));
  const size_t before = kernels::gemm_cached_primitives();
  for (int64_t t = 1; t <= max_tokens; ++t) {
    kernels::gemm(t, n, n, DType::f32, {x.data(), n, false}, {w.data(), n, true}, c.data(), n, false);  // X W^T
    kernels::gemm(n, n, t, DType::f32, {x.data(), n, true}, {x.data(), n, false}, c.data(), n, false);  // X^T X
  }
  const size_t added = kernels::gemm_cached_primitives() - before;
  // 16 exact sizes + 8 classes per octave from 16 to 1024: 16 + 8 * 6 = 64 per layout at most.
  EXPECT_LE(added, size_t(2 * 64)) << "primitives made for 1200 token counts";
  EXPECT_GT(added, size_t(2 * 16));  // the exact small sizes at least: the count is real
}

TEST(GemmSizeClasses, RemaindersShareAFewPrimitives) {
  // Every row count 200..600, as the rows of MoE experts come: the largest class of each, and its
  // remainder as an overlapping power-of-two chunk (16, 32 or 64 rows). One primitive per remainder
  // (2..16, 18..30, 36..60, ...) made about 45 here.
  const int64_t n = 24, k = 8, max_tokens = 600;
  const auto x = random_matrix<float>(max_tokens * k, 7), w = random_matrix<float>(n * k, 8);
  std::vector<float> c(size_t(max_tokens * n));
  const size_t before = kernels::gemm_cached_primitives();
  for (int64_t t = 200; t <= max_tokens; ++t)
    kernels::gemm(t, n, k, DType::f32, {x.data(), k, false}, {w.data(), k, true}, c.data(), n, false);
  // Classes from 192 to 576: 4 + 8 + 2 = 14 heads, and the remainders' 16, 32 and 64.
  EXPECT_LE(kernels::gemm_cached_primitives() - before, size_t(14 + 3));
}

TEST(GemmSizeClasses, AccumulatingRowChunksAddEachRowOnce) {
  // C += A B^T over row counts that are not classes: a chunk overlapping rows already written would
  // add their products twice. Checked against a float64 sum.
  const int64_t N = 40, K = 72;
  for (int64_t M : {17, 129, 300, 1000}) {
    SCOPED_TRACE(::testing::Message() << "M=" << M);
    const auto a = random_matrix<float>(M * K, 9), b = random_matrix<float>(N * K, 10);
    const auto c0 = random_matrix<float>(M * N, 11);
    std::vector<float> c = c0;
    kernels::gemm(M, N, K, DType::f32, {a.data(), K, false}, {b.data(), K, true}, c.data(), N, /*accumulate=*/true);
    double worst = 0;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double want = c0[size_t(i * N + j)];
        for (int64_t l = 0; l < K; ++l) want += double(a[size_t(i * K + l)]) * b[size_t(j * K + l)];
        worst = std::max(worst, std::abs(c[size_t(i * N + j)] - want));
      }
    EXPECT_LT(worst, 1e-3);  // |products| ~ 1, K = 72: fp32 sums are off by ~1e-5; a twice-added row by ~8
  }
}

// oneDNN's AVX-512 kernels (brgemm, f32 and bf16) compute a row of C alike whatever M is. Its AVX2
// sgemm (gemm:jit, which bf16 also runs on there, widened) does not: rows in a tail of fewer than 4
// of its 6-row tiles, and the rows where the threads' shares meet, are summed in another order, so
// even one exact-M GEMM gives M-dependent rows (seen on AMD Zen 3: M=7 differs from M=2048 in row 6).
// There row chunks are checked as values.
bool rows_computed_alike_for_any_m() {
  const std::string isa = kernels::gemm_cpu_isa();
  return !(isa == "sse41" || isa == "avx" || isa == "avx2" || isa == "avx2_vnni");
}

template <class T>
void rows_match_one_big_gemm() {
  const DType dt = dtype_of<T>();
  const int64_t big = 2048, N = 96, K = 80;  // 2048 is a size class: one primitive, no chunks
  const auto a = random_matrix<T>(big * K, 3), b = random_matrix<T>(N * K, 4);
  std::vector<float> ref(size_t(big * N));
  kernels::gemm(big, N, K, dt, {a.data(), K, false}, {b.data(), K, true}, ref.data(), N, false);
  for (int64_t M : {2, 17, 18, 129, 300, 1000, 2047}) {
    for (int64_t first : {0, 1}) {
      SCOPED_TRACE(::testing::Message() << "M=" << M << " first row " << first);
      std::vector<float> c(size_t(M * N));
      kernels::gemm(M, N, K, dt, {a.data() + first * K, K, false}, {b.data(), K, true}, c.data(), N, false);
      if (rows_computed_alike_for_any_m()) {
        EXPECT_EQ(std::memcmp(c.data(), ref.data() + first * N, c.size() * sizeof(float)), 0);
      } else {  // the rows of one exact-M GEMM already depend on M there: compare as values
        double worst = 0, largest = 0;
        for (size_t i = 0; i < c.size(); ++i) {
          worst = std::max(worst, std::abs(double(c[i]) - ref[size_t(first * N) + i]));
          largest = std::max(largest, std::abs(double(ref[size_t(first * N) + i])));
        }
        EXPECT_LT(worst / largest, testref::Tol<float>::rel);
      }
    }
  }
}

TEST(GemmSizeClasses, RowChunksAreBitIdenticalToOneGemmF32) { rows_match_one_big_gemm<float>(); }
TEST(GemmSizeClasses, RowChunksAreBitIdenticalToOneGemmBf16) { rows_match_one_big_gemm<bf16>(); }

template <class T>
void padded_k_matches_zero_extended() {
  const DType dt = dtype_of<T>();
  const int64_t M = 40, N = 24, K = 300, Kc = 320;  // 300 is padded to its class, 320
  // dW = dY^T X with dY [K, M] and X [K, N] inside bigger buffers whose extra rows hold junk.
  auto dy = random_matrix<T>((K + 30) * M, 5), x = random_matrix<T>((K + 30) * N, 6);
  std::vector<float> got(size_t(M * N)), want(size_t(M * N));
  kernels::gemm(M, N, K, dt, {dy.data(), M, true}, {x.data(), N, false}, got.data(), N, false);
  std::vector<T> dy0(dy.begin(), dy.begin() + Kc * M), x0(x.begin(), x.begin() + Kc * N);
  for (int64_t i = K * M; i < Kc * M; ++i) testref::store_d(&dy0[size_t(i)], 0.0);
  for (int64_t i = K * N; i < Kc * N; ++i) testref::store_d(&x0[size_t(i)], 0.0);
  kernels::gemm(M, N, Kc, dt, {dy0.data(), M, true}, {x0.data(), N, false}, want.data(), N, false);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
}

TEST(GemmSizeClasses, PaddedKIsBitIdenticalToZeroExtendedF32) { padded_k_matches_zero_extended<float>(); }
TEST(GemmSizeClasses, PaddedKIsBitIdenticalToZeroExtendedBf16) { padded_k_matches_zero_extended<bf16>(); }

}  // namespace
}  // namespace tessel
