// FP8 casts and quantisation against an independent reference: the finite values of each format
// written out from the OCP spec's formula, nearest-even chosen in double precision.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "tessel/core/rng.h"
#include "tessel/kernels/fp8.h"

using namespace tessel;

namespace {

struct Format {
  DType dtype;
  int exp_bits, man_bits, bias;
  bool ieee;  // e5m2: all-ones exponent is inf / NaN; e4m3: only S.1111.111 is NaN
};
const Format kFormats[] = {{DType::e4m3, 4, 3, 7, false}, {DType::e5m2, 5, 2, 15, true}};

// code -> value for every finite non-negative code, from the spec's formula.
std::map<double, int> finite_values(const Format& f) {
  std::map<double, int> v;
  for (int code = 0; code < 128; ++code) {
    const int e = code >> f.man_bits, m = code & ((1 << f.man_bits) - 1);
    const int emax = (1 << f.exp_bits) - 1;
    if (f.ieee && e == emax) continue;
    if (!f.ieee && e == emax && m == (1 << f.man_bits) - 1) continue;
    const double frac = double(m) / double(1 << f.man_bits);
    v[e == 0 ? std::ldexp(frac, 1 - f.bias) : std::ldexp(1.0 + frac, e - f.bias)] = code;
  }
  return v;
}

// Saturating round-to-nearest-even, in double.
int reference_encode(double x, const Format& f) {
  const auto values = finite_values(f);
  const int sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(x);
  if (std::isnan(x)) return -1;
  if (a >= values.rbegin()->first) return sign | values.rbegin()->second;
  auto hi = values.lower_bound(a);
  if (hi->first == a) return sign | hi->second;
  auto lo = std::prev(hi);
  const double dl = a - lo->first, dh = hi->first - a;
  const int code = dl < dh ? lo->second : dh < dl ? hi->second : ((lo->second & 1) == 0 ? lo->second : hi->second);
  return sign | code;
}

std::vector<float> probes(const Format& f) {
  std::vector<float> p{0.0f, -0.0f, INFINITY, -INFINITY, 1e-30f, -1e-30f, 1e30f, 3.0e38f};
  const auto values = finite_values(f);
  double prev = -1;
  for (const auto& [v, code] : values) {
    for (float s : {1.0f, -1.0f}) {
      p.push_back(s * float(v));
      p.push_back(s * std::nextafter(float(v), 0.0f));
      p.push_back(s * std::nextafter(float(v), INFINITY));
      if (prev >= 0) {  // the midpoint (a tie) and its neighbours
        const float mid = float((prev + v) / 2);
        p.insert(p.end(), {s * mid, s * std::nextafter(mid, 0.0f), s * std::nextafter(mid, INFINITY)});
      }
    }
    prev = v;
  }
  for (uint64_t i = 0; i < 20000; ++i)  // random magnitudes over the whole range
    p.push_back(float(std::ldexp(double(philox_uniform(3, 1, i)) * 2 - 1, int(philox_uniform(3, 2, i) * 40) - 24)));
  return p;
}

TEST(Fp8, EncodeMatchesNearestEvenWithSaturationForEveryProbe) {
  for (const auto& f : kFormats) {
    for (float x : probes(f)) {
      const int want = reference_encode(x, f);
      const uint8_t got = kernels::fp8_encode(x, f.dtype);
      ASSERT_EQ(int(got), want) << dtype_name(f.dtype) << " x=" << x;
    }
    const uint8_t nan = kernels::fp8_encode(NAN, f.dtype);
    EXPECT_TRUE(std::isnan(kernels::fp8_decode(nan, f.dtype))) << dtype_name(f.dtype);
  }
}

TEST(Fp8, EveryFiniteValueRoundTripsAndDecodesAsTheSpecSays) {
  for (const auto& f : kFormats)
    for (const auto& [v, code] : finite_values(f))
      for (int sign : {0, 0x80}) {
        const float value = kernels::fp8_decode(uint8_t(code | sign), f.dtype);
        EXPECT_EQ(double(value), sign ? -v : v) << dtype_name(f.dtype) << " code " << code;
        EXPECT_EQ(int(kernels::fp8_encode(value, f.dtype)), code | sign);
        EXPECT_EQ(float(bf16(value)), value) << "every FP8 value is a bf16 value";
      }
  EXPECT_EQ(kernels::fp8_max(DType::e4m3), 448.0f);
  EXPECT_EQ(kernels::fp8_max(DType::e5m2), 57344.0f);
}

std::vector<float> random_matrix(int64_t n, uint64_t stream, float spread) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)  // magnitudes over several binades, so tiles get different scales
    x[size_t(i)] = philox_normal(7, stream, uint64_t(i)) * std::exp2(spread * float((i * 7919) % 11) / 10.0f);
  return x;
}

// |x - dequant| <= half an ulp of x in the format (relative 2^-(m+1)) or half the subnormal step.
void expect_within_format(const std::vector<float>& x, const std::vector<float>& back, const std::vector<float>& sinv,
                          DType fmt) {
  const int m = fmt == DType::e4m3 ? 3 : 2;
  const double sub = fmt == DType::e4m3 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -17);
  for (size_t i = 0; i < x.size(); ++i) {
    const double bound = std::max(std::fabs(double(x[i])) * std::ldexp(1.0, -(m + 1)), sub * double(sinv[i])) * 1.0001;
    ASSERT_LE(std::fabs(double(x[i]) - double(back[i])), bound) << "element " << i;
  }
}

// amax against a plain loop in double, fp32 and bf16 inputs, at every length from 0 to 70 (below, at
// and past the kernel's 16 running maxima) with the largest magnitude at every position, negative
// half the time; and NaN anywhere (the tail included) gives NaN, an infinity gives infinity.
TEST(Fp8, AmaxIsTheLargestMagnitudeAtEveryLengthAndPosition) {
  int64_t checked = 0;
  for (int64_t n = 0; n <= 70; ++n)
    for (int64_t at = 0; at < std::max<int64_t>(n, 1); ++at) {
      std::vector<float> x = random_matrix(n, uint64_t(100 * n + at), 1.0f);
      if (n > 0) x[size_t(at)] = (at % 2 ? -1.0f : 1.0f) * (50.0f + float(at));
      std::vector<bf16> xb(x.size());
      for (size_t i = 0; i < x.size(); ++i) xb[i] = bf16(x[i]);
      double want = 0, want_b = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        want = std::max(want, std::fabs(double(x[i])));
        want_b = std::max(want_b, std::fabs(double(float(xb[i]))));
      }
      EXPECT_EQ(double(kernels::amax(n, x.data())), want) << "n " << n << " at " << at;
      EXPECT_EQ(double(kernels::amax(n, xb.data())), want_b) << "bf16, n " << n << " at " << at;
      if (n > 0) {
        std::vector<float> with_nan = x, with_inf = x;
        with_nan[size_t(at)] = NAN;
        with_inf[size_t(at)] = -INFINITY;
        EXPECT_TRUE(std::isnan(kernels::amax(n, with_nan.data()))) << "n " << n << " at " << at;
        EXPECT_EQ(kernels::amax(n, with_inf.data()), INFINITY) << "n " << n << " at " << at;
      }
      ++checked;
    }
  EXPECT_GT(checked, 2000);
}

TEST(Fp8, PerTensorQuantisationIsWithinTheFormatsHalfUlp) {
  const auto x = random_matrix(5000, 1, 8.0f);
  for (const auto& f : kFormats) {
    const float a = kernels::amax(int64_t(x.size()), x.data());
    double want = 0;
    for (float v : x) want = std::max(want, std::fabs(double(v)));
    EXPECT_EQ(double(a), want);
    const float s = kernels::fp8_scale_for(a, f.dtype, 0, false);
    EXPECT_NEAR(a * s, kernels::fp8_max(f.dtype), 1e-3);
    std::vector<uint8_t> q(x.size());
    kernels::fp8_quantize(int64_t(x.size()), x.data(), s, f.dtype, q.data());
    std::vector<bf16> d(x.size());
    kernels::fp8_dequantize(int64_t(x.size()), q.data(), f.dtype, 1.0f / s, d.data());
    std::vector<float> back(x.size()), sinv(x.size(), 1.0f / s);
    for (size_t i = 0; i < x.size(); ++i) {
      back[i] = kernels::fp8_decode(q[i], f.dtype) / s;
      // scale_inv is not a power of two here: the bf16 dequantisation rounds q * scale_inv once more
      ASSERT_EQ(float(d[i]), float(bf16(kernels::fp8_decode(q[i], f.dtype) * (1.0f / s))));
    }
    expect_within_format(x, back, sinv, f.dtype);
  }
}

TEST(Fp8, TilesAndBlocksUsePowerOfTwoScalesAndStayWithinTheFormat) {
  const int64_t R = 200, C = 300;  // partial tiles on both edges
  const auto x = random_matrix(R * C, 2, 12.0f);
  for (const auto& f : kFormats) {
    // 1 x 128 row tiles
    std::vector<uint8_t> q(size_t(R * C));
    std::vector<float> sinv(size_t(R * 3));
    kernels::fp8_quantize_row_tiles(R, C, x.data(), C, f.dtype, true, q.data(), sinv.data());
    std::vector<bf16> d(size_t(R * C));
    kernels::fp8_dequantize_row_tiles(R, C, q.data(), f.dtype, sinv.data(), d.data());
    std::vector<float> back(d.begin(), d.end()), per(size_t(R * C));
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) {
        const float si = sinv[size_t(r * 3 + c / 128)];
        EXPECT_EQ(std::exp2(std::round(std::log2(si))), si);  // a power of two
        per[size_t(r * C + c)] = si;
        // exact: the bf16 dequantisation equals q * scale_inv
        ASSERT_EQ(back[size_t(r * C + c)], kernels::fp8_decode(q[size_t(r * C + c)], f.dtype) * si);
      }
    expect_within_format(x, back, per, f.dtype);

    // 128 x 1 column tiles, transposed: the row tiles of the transpose
    std::vector<float> xt(size_t(R * C));
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) xt[size_t(c * R + r)] = x[size_t(r * C + c)];
    std::vector<uint8_t> qt(size_t(R * C)), qt_ref(size_t(R * C));
    std::vector<float> st(size_t(C * 2)), st_ref(size_t(C * 2));
    kernels::fp8_quantize_col_tiles_transposed(R, C, x.data(), C, f.dtype, true, qt.data(), st.data());
    kernels::fp8_quantize_row_tiles(C, R, xt.data(), R, f.dtype, true, qt_ref.data(), st_ref.data());
    EXPECT_EQ(qt, qt_ref);
    EXPECT_EQ(st, st_ref);

    // 128 x 128 blocks
    std::vector<float> sb(size_t(((R + 127) / 128) * ((C + 127) / 128)));  // one scale per 128 x 128 block
    kernels::fp8_quantize_blocks(R, C, x.data(), f.dtype, true, q.data(), sb.data());
    kernels::fp8_dequantize_blocks(R, C, q.data(), f.dtype, sb.data(), d.data());
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) per[size_t(r * C + c)] = sb[size_t((r / 128) * 3 + c / 128)];
    back.assign(d.begin(), d.end());
    expect_within_format(x, back, per, f.dtype);

    // A bf16 weight quantised as it is gives what its (exact) fp32 widening gives, bit for bit.
    std::vector<bf16> xb(x.size());
    std::vector<float> widened(x.size());
    for (size_t i = 0; i < x.size(); ++i) widened[i] = float(xb[i] = bf16(x[i]));
    std::vector<uint8_t> qb(q.size()), qw(q.size());
    std::vector<float> sbb(sb.size()), sbw(sb.size());
    kernels::fp8_quantize_blocks(R, C, xb.data(), f.dtype, true, qb.data(), sbb.data());
    kernels::fp8_quantize_blocks(R, C, widened.data(), f.dtype, true, qw.data(), sbw.data());
    EXPECT_EQ(qb, qw);
    EXPECT_EQ(sbb, sbw);
  }
}

TEST(Fp8, ScalesHandleZeroAndNonFiniteAmax) {
  EXPECT_EQ(kernels::fp8_scale_for(0.0f, DType::e4m3, 0, false), 1.0f);
  EXPECT_EQ(kernels::fp8_scale_for(INFINITY, DType::e4m3, 0, false), 1.0f);
  EXPECT_EQ(kernels::fp8_scale_for(NAN, DType::e4m3, 0, true), 1.0f);
  EXPECT_EQ(kernels::fp8_scale_for(448.0f, DType::e4m3, 2, false), 0.25f);  // margin divides by 2^margin
  EXPECT_EQ(kernels::fp8_scale_for(3.0f, DType::e4m3, 0, true), 128.0f);    // 149.3 rounded down
  const float with_nan[] = {1.0f, NAN, 2.0f};
  EXPECT_TRUE(std::isnan(kernels::amax(3, with_nan)));
}

}  // namespace
