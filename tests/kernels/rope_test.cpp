// RoPE against the direct double formula (HF rotate-half), applied in place to heads that live inside a
// wider row (strided, offset), and inverse(apply(x)) == x.
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "kernels/reference.h"
#include "tessel/core/check.h"
#include "tessel/kernels/rope.h"

namespace tessel {
namespace {

using testref::Rand;
using testref::sz;
using testref::Tol;

// (B, T, heads, Dh, base)
class RopeTest : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, int64_t, int64_t, double>> {};

TEST_P(RopeTest, MatchesFormulaAndInverts) {
  const auto [B, T, heads, Dh, base] = GetParam();
  const int64_t rows = B * T, col0 = 2, ld = heads * Dh + 5;  // heads start at column 2 of a wider row
  Rand rng(uint64_t(B * 7 + T * 131 + heads * 3 + Dh));
  std::vector<float> buf = rng.normals(sz(rows * ld));
  const std::vector<float> orig = buf;
  const kernels::RopeTable tab(T, Dh, base);
  kernels::rope_apply(tab, rows, heads, buf.data() + col0, ld, false);

  std::vector<double> got, ref, got_pad, ref_pad;
  std::vector<double> xin(sz(Dh)), yref(sz(Dh));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < ld; ++c)
      if (c < col0 || c >= col0 + heads * Dh) {
        ASSERT_EQ(buf[sz(r * ld + c)], orig[sz(r * ld + c)]) << "RoPE wrote outside its heads: row " << r << " col " << c;
      }
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t off = r * ld + col0 + h * Dh;
      for (int64_t d = 0; d < Dh; ++d) xin[sz(d)] = orig[sz(off + d)];
      testref::rope_head(Dh, r % T, base, xin.data(), yref.data());
      for (int64_t d = 0; d < Dh; ++d) {
        got.push_back(buf[sz(off + d)]);
        ref.push_back(yref[sz(d)]);
      }
    }
  }
  EXPECT_TRUE(testref::all_close(got, ref, Tol<float>::rel, "rope(x)"));

  // Inverse of the forward gives back x (to fp32 rounding of two rotations).
  kernels::rope_apply(tab, rows, heads, buf.data() + col0, ld, true);
  EXPECT_TRUE(testref::all_close(testref::to_double(buf), testref::to_double(orig), Tol<float>::rel, "inverse(rope(x))"));

  // The inverse alone is the rotation by -angle (the backward of rope).
  std::vector<float> inv = orig;
  kernels::rope_apply(tab, rows, heads, inv.data() + col0, ld, true);
  got.clear();
  ref.clear();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t off = r * ld + col0 + h * Dh;
      for (int64_t d = 0; d < Dh; ++d) xin[sz(d)] = orig[sz(off + d)];
      testref::rope_head(Dh, -(r % T), base, xin.data(), yref.data());
      for (int64_t d = 0; d < Dh; ++d) {
        got.push_back(inv[sz(off + d)]);
        ref.push_back(yref[sz(d)]);
      }
    }
  EXPECT_TRUE(testref::all_close(got, ref, Tol<float>::rel, "rope^-1(x)"));
}

std::string rope_name(const ::testing::TestParamInfo<RopeTest::ParamType>& info) {
  const auto& [B, T, heads, Dh, base] = info.param;
  return "B" + std::to_string(B) + "_T" + std::to_string(T) + "_H" + std::to_string(heads) + "_Dh" +
         std::to_string(Dh) + "_base" + std::to_string(int64_t(base));
}
INSTANTIATE_TEST_SUITE_P(Grid, RopeTest,
                         ::testing::Combine(::testing::Values<int64_t>(1, 2), ::testing::Values<int64_t>(1, 7, 65, 130),
                                            ::testing::Values<int64_t>(1, 3), ::testing::Values<int64_t>(2, 8, 64, 130),
                                            ::testing::Values(10000.0, 500000.0)),
                         rope_name);

// Multi-latent attention's layout: each head is nope + rope columns and only its last rope are
// rotated, all heads in one call (head_stride = nope + rope); the nope columns stay as they are.
TEST(Rope, HeadsApartRotateOnlyTheirOwnColumns) {
  const int64_t T = 7, rows = 2 * T, heads = 3, Dh = 8, nope = 5, stride = nope + Dh, ld = heads * stride + 2;
  const double base = 10000.0;
  Rand rng(23);
  std::vector<float> buf = rng.normals(sz(rows * ld));
  const std::vector<float> orig = buf;
  const kernels::RopeTable tab(T, Dh, base);
  kernels::rope_apply(tab, rows, heads, buf.data() + nope, ld, false, -1, stride);
  std::vector<double> got, ref, xin(sz(Dh)), yref(sz(Dh));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < ld; ++c) {
      const int64_t in_head = c % stride, h = c / stride;
      if (h >= heads || in_head < nope) {
        ASSERT_EQ(buf[sz(r * ld + c)], orig[sz(r * ld + c)]) << "row " << r << " col " << c;
        continue;
      }
      if (in_head != nope) continue;  // once per head: its first rotary column
      for (int64_t d = 0; d < Dh; ++d) xin[sz(d)] = orig[sz(r * ld + c + d)];
      testref::rope_head(Dh, r % T, base, xin.data(), yref.data());
      for (int64_t d = 0; d < Dh; ++d) {
        got.push_back(buf[sz(r * ld + c + d)]);
        ref.push_back(yref[sz(d)]);
      }
    }
  ASSERT_EQ(got.size(), sz(rows * heads * Dh));
  EXPECT_TRUE(testref::all_close(got, ref, Tol<float>::rel, "rope(x), heads apart"));
}

TEST(Rope, AShapeThatIsNotHeadsApartIsRefused) {
  const kernels::RopeTable tab(4, 8, 10000.0);
  try {
    kernels::rope(tab, Tensor::empty({4, 30}, DType::f32), 3, false, -1, 13);  // 3 heads 13 apart need 34
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rope: x must be f32 [rows, 3 heads x 8 columns, 13 apart]"), std::string::npos)
        << e.what();
  }
}

TEST(Rope, TableValues) {
  const kernels::RopeTable tab(5, 6, 10000.0);
  EXPECT_EQ(tab.T, 5);
  EXPECT_EQ(tab.half, 3);
  ASSERT_EQ(tab.cos.size(), 15u);
  for (int64_t t = 0; t < 5; ++t)
    for (int64_t j = 0; j < 3; ++j) {
      const double a = double(t) * std::pow(10000.0, -2.0 * double(j) / 6.0);
      EXPECT_NEAR(tab.cos[sz(t * 3 + j)], std::cos(a), 1e-7) << t << "," << j;
      EXPECT_NEAR(tab.sin[sz(t * 3 + j)], std::sin(a), 1e-7) << t << "," << j;
    }
}

TEST(Rope, OddHeadDimThrows) { EXPECT_THROW(kernels::RopeTable(4, 7, 10000.0), Error); }

}  // namespace
}  // namespace tessel
