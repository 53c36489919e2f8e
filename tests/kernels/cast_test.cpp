// Bulk casts and small elementwise helpers: the vectorised f32 -> bf16 cast must agree bit for bit with
// the scalar bf16(float) (itself checked against an independent RNE in tests/core/dtype_test.cpp) on
// every class of input; bf16 -> f32 is exact; column sums against double.
#include <gtest/gtest.h>

#include <limits>
#include <tuple>
#include <vector>

#include "kernels/reference.h"
#include "tessel/kernels/cast.h"

namespace tessel {
namespace {

using testref::Rand;
using testref::sz;
using testref::Tol;

std::vector<float> special_floats() {
  std::vector<uint32_t> bits = {
      0x00000000, 0x80000000,              // +-0
      0x00000001, 0x80000001, 0x007fffff,  // subnormals
      0x00008000, 0x00018000, 0x00007fff,  // subnormal ties / just below a tie
      0x00800000, 0x7f7fffff, 0xff7fffff,  // min normal, +-max (rounds to inf)
      0x7f7f7fff, 0x7f7f8000,              // below the max tie, the tie (odd -> inf)
      0x7f800000, 0xff800000,              // +-inf
      0x7fc00000, 0xffc00000, 0x7f800001,  // quiet NaNs, signalling NaN with only low payload bits
      0x7f808000, 0xff800001, 0x7fffffff,  // more NaNs (payload in/below the kept half)
      0x3f808000, 0x3f818000,              // 1 + tie: even (stays), odd (rounds up)
      0x3f808001, 0x3f817fff,              // just above / below ties
      0x3f800000, 0xbf800000, 0x40490fdb,  // 1, -1, pi
  };
  std::vector<float> v;
  for (uint32_t b : bits) v.push_back(bits_f32(b));
  return v;
}

TEST(Cast, F32ToBf16MatchesScalarOnEveryInputClass) {
  std::vector<float> x = special_floats();
  Rand rng(1);
  // Random bit patterns cover every exponent (incl. subnormal, inf/NaN) and sign; then exact ties.
  for (int i = 0; i < 200000; ++i) x.push_back(bits_f32(uint32_t(rng.gen())));
  for (int i = 0; i < 20000; ++i) x.push_back(bits_f32((uint32_t(rng.gen()) & 0xffff0000u) | 0x8000u));
  for (int64_t n : {int64_t(x.size()), int64_t(1), int64_t(15), int64_t(17)}) {  // vector body and tails
    SCOPED_TRACE(n);
    std::vector<bf16> out(sz(n));
    kernels::cast_f32_to_bf16(n, x.data(), out.data());
    for (size_t i = 0; i < sz(n); ++i) {
      const uint16_t want = bf16(x[i]).bits;
      if (std::isnan(x[i])) {
        // Any NaN is acceptable, with the sign kept.
        ASSERT_TRUE((out[i].bits & 0x7f80) == 0x7f80 && (out[i].bits & 0x7f) != 0)
            << std::hex << "NaN input 0x" << f32_bits(x[i]) << " gave 0x" << out[i].bits;
        ASSERT_EQ(out[i].bits >> 15, f32_bits(x[i]) >> 31);
      } else {
        ASSERT_EQ(out[i].bits, want) << std::hex << "input 0x" << f32_bits(x[i]);
      }
    }
  }
}

TEST(Cast, Bf16ToF32IsExact) {
  std::vector<bf16> x(65536);
  for (uint32_t b = 0; b < 65536; ++b) x[b].bits = uint16_t(b);
  std::vector<float> out(65536);
  kernels::cast_bf16_to_f32(65536, x.data(), out.data());
  for (uint32_t b = 0; b < 65536; ++b) ASSERT_EQ(f32_bits(out[b]), b << 16) << b;
}

TEST(Cast, AddIsExactSumAndMayAlias) {
  Rand rng(4);
  for (int64_t n : {1, 17, 1000, 4099}) {
    const std::vector<float> a = rng.normals(sz(n)), b = rng.normals(sz(n));
    std::vector<float> out(sz(n)), inplace = a;
    kernels::add(n, a.data(), b.data(), out.data());
    kernels::add(n, inplace.data(), b.data(), inplace.data());
    for (size_t i = 0; i < sz(n); ++i) {
      ASSERT_EQ(out[i], a[i] + b[i]) << i;
      ASSERT_EQ(inplace[i], a[i] + b[i]) << i;
    }
  }
}

// (N, D, bf16 input)
class ColumnSumTest : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, bool>> {};

template <class T>
void check_column_sum(int64_t N, int64_t D) {
  Rand rng(uint64_t(N * 1000 + D));
  std::vector<T> x(sz(N * D));
  for (auto& e : x) testref::store_d(&e, rng.normal());
  std::vector<float> out = rng.normals(sz(D));  // accumulated into
  std::vector<double> ref = testref::to_double(out);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < D; ++j) ref[sz(j)] += testref::to_d(x[sz(i * D + j)]);
  kernels::column_sum_accumulate<T>(N, D, x.data(), out.data());
  // Inputs are exact (bf16 values as given), the sum is fp32: the f32 bar.
  EXPECT_TRUE(testref::all_close(testref::to_double(out), ref, Tol<float>::rel, "column sums"));
}

TEST_P(ColumnSumTest, MatchesDoubleSum) {
  const auto [N, D, is_bf16] = GetParam();
  if (is_bf16)
    check_column_sum<bf16>(N, D);
  else
    check_column_sum<float>(N, D);
}

std::string colsum_name(const ::testing::TestParamInfo<ColumnSumTest::ParamType>& info) {
  const auto& [N, D, b] = info.param;
  return std::string(b ? "bf16" : "f32") + "_N" + std::to_string(N) + "_D" + std::to_string(D);
}
INSTANTIATE_TEST_SUITE_P(Grid, ColumnSumTest,
                         ::testing::Combine(::testing::Values<int64_t>(1, 3, 17, 65, 1000),
                                            ::testing::Values<int64_t>(1, 3, 17, 63, 64, 65, 130), ::testing::Bool()),
                         colsum_name);

}  // namespace
}  // namespace tessel
