// GemmPrimitiveCensus: what a dry run learns of the heap oneDNN's GEMM primitives hold. Checked
// against the cpu run itself: the primitives its cache makes for the same calls, and the heap the
// process keeps after making them (glibc's own count, taken here around the calls).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "support/glibc_heap.h"
#include "tessel/core/block_pool.h"
#include "tessel/core/device.h"
#include "tessel/core/tensor.h"
#include "tessel/kernels/gemm.h"
#include "tessel/kernels/gemm_primitive_census.h"

namespace tessel {
namespace {

using testing::glibc_heap_in_use;

// X [M, K] @ W [N, K]^T on `device`; the row counts M are a MoE expert's (size classes, overlapping tails).
void forward_gemms(const std::vector<int64_t>& rows, int64_t N, int64_t K, Device device) {
  for (const int64_t M : rows) {
    const Tensor x = Tensor::zeros({M, K}, DType::f32, device), w = Tensor::zeros({N, K}, DType::f32, device);
    const Tensor y = Tensor::empty({M, N}, DType::f32, device);
    kernels::matmul(x, false, w, true, y, false);
  }
  const DeviceAccessScope synchronised;  // under TESSEL_DEVICE=cpu-strict the calls are queued
}

// The widths below are odd ones that no other test of this binary uses: under TESSEL_DEVICE=cpu-strict
// all of them run in one process, whose cache must not hold these problems yet.

TEST(GemmPrimitiveCensus, CountsOnMetaThePrimitivesTheCpuRunMakes) {
  // 300 and 290 rows both run as 288 rows and a 16-row tail: 2 primitives for 4 calls.
  const std::vector<int64_t> rows = {300, 290, 300, 288};
  int64_t counted = 0;
  {
    const kernels::GemmPrimitiveCensus census;
    forward_gemms(rows, 41, 27, Device::meta);
    counted = census.primitives();
    if (testing::glibc_counts_the_heap()) {
      EXPECT_GT(census.heap_bytes(), 0);
    }
  }
  const size_t before = kernels::gemm_cached_primitives();
  forward_gemms(rows, 41, 27, Device::cpu);
  EXPECT_EQ(counted, int64_t(kernels::gemm_cached_primitives() - before));
  EXPECT_EQ(counted, 2);
  // One at a time in a process.
  const kernels::GemmPrimitiveCensus census;
  EXPECT_THROW(kernels::GemmPrimitiveCensus(), Error);
}

TEST(GemmPrimitiveCensus, HeapBytesAreWhatTheCpuRunKeeps) {
  if (!testing::glibc_counts_the_heap()) GTEST_SKIP() << "glibc does not count this build's heap (a sanitizer's allocator)";
  // Problems this process has run: the census sums what their first run left on the heap, less
  // what tessel's pool took for the scratchpads. oneDNN's one-time set-up (some kernels are
  // generated at a problem's first run, once per kind of problem) is done first, on other widths.
  const int64_t N = 54, K = 29, max_rows = 400;
  const std::vector<float> x(size_t(max_rows * K), 0.5f), w(size_t(N * K), 0.25f);
  std::vector<float> y(size_t(max_rows * N));
  const std::vector<int64_t> ran = {16, 64, 256, 400};
  for (const int64_t M : ran)
    kernels::gemm(M, N / 2, K, DType::f32, {x.data(), K, false}, {w.data(), K, true}, y.data(), N / 2, false);
  // 400 rows run as 384 and a 16-row tail, which the 16-row call's primitive serves: 4 primitives.
  const int64_t heap_before = glibc_heap_in_use(), pool_before = int64_t(tensor_pool_stats().segment_bytes);
  const size_t cached_before = kernels::gemm_cached_primitives();
  for (const int64_t M : ran)
    kernels::gemm(M, N, K, DType::f32, {x.data(), K, false}, {w.data(), K, true}, y.data(), N, false);
  const int64_t kept =
      glibc_heap_in_use() - heap_before - (int64_t(tensor_pool_stats().segment_bytes) - pool_before);
  const int64_t made = int64_t(kernels::gemm_cached_primitives() - cached_before);
  ASSERT_EQ(made, 4);
  int64_t run_bytes = 0;  // the census's bytes for the problems run
  {
    const kernels::GemmPrimitiveCensus census;
    forward_gemms(ran, N, K, Device::meta);
    EXPECT_EQ(census.primitives(), made);
    // The run also kept some bookkeeping per problem (the scratchpad size it asked for first, map
    // nodes): 2 KB each here, against some 35 KB of primitive.
    EXPECT_LE(census.heap_bytes(), kept);
    EXPECT_GE(census.heap_bytes(), kept - made * 4096);
    run_bytes = census.heap_bytes();
  }
  // Problems it has not run (another K): the census makes each primitive to measure it. Of the same
  // form, they hold about what those run did (the primitives alone: the run's bookkeeping, 2 KB a
  // problem, is a quarter of an AVX2 primitive).
  const kernels::GemmPrimitiveCensus census;
  forward_gemms(ran, N, K + 8, Device::meta);
  ASSERT_EQ(census.primitives(), made);
  const double per_primitive = double(run_bytes) / double(made), measured = double(census.heap_bytes()) / double(made);
  EXPECT_GT(per_primitive, 4e3) << "a oneDNN matmul primitive holds kilobytes (AVX2: 8 KB, AVX-512: 35 KB)";
  EXPECT_NEAR(measured, per_primitive, 0.25 * per_primitive);
  EXPECT_EQ(kernels::gemm_cached_primitives() - cached_before, size_t(made)) << "the census fills no cache entry";
}

}  // namespace
}  // namespace tessel
