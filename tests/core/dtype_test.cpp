// Narrow float formats against independent definitions:
//  - fp8 (OCP 8-bit floating point spec, v1.0): every code decodes to the value of the spec's formula;
//    encoding (round to nearest, ties to even mantissa, saturating) equals a brute-force nearest-value
//    search over all codes;
//  - f16 (IEEE binary16): encoding equals a nearest search over the 65536 codes' values, overflow to inf;
//  - bf16: RNE computed in double arithmetic.
// None of the reference code calls the library's encoders or decoders.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "tessel/core/check.h"
#include "tessel/core/dtype.h"

namespace tessel {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------------------------------------------
// OCP FP8 formulas. E4M3: S.EEEE.MMM, bias 7, no infinities, S.1111.111 = NaN.
//   E == 0: (-1)^S 2^(1-7) (M/8);  else (-1)^S 2^(E-7) (1 + M/8).
// E5M2: S.EEEEE.MM, bias 15, E == 31: M == 0 inf, else NaN.
//   E == 0: (-1)^S 2^(1-15) (M/4); else (-1)^S 2^(E-15) (1 + M/4).
double e4m3_formula(uint32_t c) {
  const int s = (c >> 7) & 1, e = (c >> 3) & 15, m = c & 7;
  double v;
  if (e == 15 && m == 7) return kNaN;
  if (e == 0) v = std::pow(2.0, -6) * (m / 8.0);
  else v = std::pow(2.0, e - 7) * (1.0 + m / 8.0);
  return s ? -v : v;
}
double e5m2_formula(uint32_t c) {
  const int s = (c >> 7) & 1, e = (c >> 2) & 31, m = c & 3;
  double v;
  if (e == 31) v = m == 0 ? kInf : kNaN;
  else if (e == 0) v = std::pow(2.0, -14) * (m / 4.0);
  else v = std::pow(2.0, e - 15) * (1.0 + m / 4.0);
  return s ? -v : v;
}
// IEEE binary16: S.EEEEE.MMMMMMMMMM, bias 15.
double f16_formula(uint32_t c) {
  const int s = (c >> 15) & 1, e = (c >> 10) & 31, m = c & 1023;
  double v;
  if (e == 31) v = m == 0 ? kInf : kNaN;
  else if (e == 0) v = std::pow(2.0, -14) * (m / 1024.0);
  else v = std::pow(2.0, e - 15) * (1.0 + m / 1024.0);
  return s ? -v : v;
}

bool same_value(double a, double b) {  // NaN == NaN, and +0 / -0 distinguished
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

TEST(Fp8, E4M3EveryCodeDecodesToSpecValue) {
  int nans = 0;
  for (uint32_t c = 0; c < 256; ++c) {
    const double want = e4m3_formula(c);
    nans += std::isnan(want);
    EXPECT_TRUE(same_value(e4m3_to_f32(uint8_t(c)), want)) << "code " << c << ": " << e4m3_to_f32(uint8_t(c)) << " vs " << want;
    fp8_e4m3 x;
    x.bits = uint8_t(c);
    EXPECT_TRUE(same_value(float(x), want)) << c;
    EXPECT_TRUE(same_value(decode_small_float(c, kE4M3), want)) << c;
    EXPECT_FALSE(std::isinf(e4m3_to_f32(uint8_t(c)))) << "E4M3 has no infinities: code " << c;
  }
  EXPECT_EQ(nans, 2);  // only S.1111.111
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0xff)));
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0xfe), -448.0f);
  EXPECT_EQ(e4m3_to_f32(0x78), 256.0f);  // S.1111.000 is a normal number in E4M3
  EXPECT_EQ(e4m3_to_f32(0x01), 0.001953125f);  // 2^-9, smallest subnormal
  EXPECT_EQ(kE4M3.max_finite(), 448.0);
}

TEST(Fp8, E5M2EveryCodeDecodesToSpecValue) {
  int nans = 0, infs = 0;
  for (uint32_t c = 0; c < 256; ++c) {
    const double want = e5m2_formula(c);
    nans += std::isnan(want);
    infs += std::isinf(want);
    EXPECT_TRUE(same_value(e5m2_to_f32(uint8_t(c)), want)) << "code " << c << ": " << e5m2_to_f32(uint8_t(c)) << " vs " << want;
    fp8_e5m2 x;
    x.bits = uint8_t(c);
    EXPECT_TRUE(same_value(float(x), want)) << c;
  }
  EXPECT_EQ(nans, 6);
  EXPECT_EQ(infs, 2);
  EXPECT_EQ(e5m2_to_f32(0x7b), 57344.0f);
  EXPECT_EQ(e5m2_to_f32(0x7c), std::numeric_limits<float>::infinity());
  EXPECT_EQ(e5m2_to_f32(0xfc), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(e5m2_to_f32(0x01), std::ldexp(1.0f, -16));  // smallest subnormal
  EXPECT_EQ(kE5M2.max_finite(), 57344.0);
}

TEST(F16, EveryCodeDecodesToIeeeValue) {
  for (uint32_t c = 0; c < 65536; ++c) {
    f16 x;
    x.bits = uint16_t(c);
    ASSERT_TRUE(same_value(float(x), f16_formula(c))) << "code " << c;
  }
  EXPECT_EQ(kF16.max_finite(), 65504.0);
}

// ---------------------------------------------------------------------------------------------------
// Round trips: encode(decode(c)) == c for every finite code.
TEST(Fp8, RoundTripEveryFiniteCode) {
  for (uint32_t c = 0; c < 256; ++c) {
    const double a = e4m3_formula(c);
    if (!std::isnan(a)) {
      EXPECT_EQ(fp8_e4m3(float(a)).bits, c) << "E4M3 code " << c;
      EXPECT_EQ(encode_small_float(float(a), kE4M3, false), c) << "E4M3 non-saturating code " << c;
    }
    const double b = e5m2_formula(c);
    if (std::isfinite(b)) {
      EXPECT_EQ(fp8_e5m2(float(b)).bits, c) << "E5M2 code " << c;
      EXPECT_EQ(encode_small_float(float(b), kE5M2, false), c) << "E5M2 non-saturating code " << c;
    }
  }
}

TEST(F16, RoundTripEveryFiniteCode) {
  for (uint32_t c = 0; c < 65536; ++c) {
    const double v = f16_formula(c);
    if (std::isfinite(v)) {
      ASSERT_EQ(f16(float(v)).bits, c) << c;
    }
  }
}

TEST(Bf16, RoundTripEveryNonNanCode) {
  for (uint32_t c = 0; c < 65536; ++c) {
    const float v = bits_f32(c << 16);
    if (!std::isnan(v)) {
      ASSERT_EQ(bf16(v).bits, c) << c;
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// Brute-force nearest encoder. Candidates are the codes of the input's sign (so zero keeps its sign),
// sorted by value; ties go to the code with an even mantissa (even code, since the mantissa LSB is
// bit 0). `beyond`: a virtual next value past max finite, as an unbounded exponent would give it
// (2^(emax+1), mantissa 0: even); an input rounding to it has overflowed.
struct NearestEncoder {
  std::vector<std::pair<double, uint32_t>> pos;  // (|value|, positive code), ascending
  uint32_t sign_bit;
  double beyond;
  NearestEncoder(double (*formula)(uint32_t), uint32_t ncodes, double beyond_value)
      : sign_bit(ncodes / 2), beyond(beyond_value) {
    for (uint32_t c = 0; c < ncodes / 2; ++c) {
      const double v = formula(c);
      if (std::isfinite(v)) pos.push_back({v, c});
    }
    std::sort(pos.begin(), pos.end());
  }
  // Returns the code, or -1 for "overflowed past max finite".
  int64_t nearest(double x) const {
    const double a = std::fabs(x);
    const uint32_t s = std::signbit(x) ? sign_bit : 0;
    // Upper neighbour by binary search (the search is an optimisation of the linear scan over codes).
    auto it = std::lower_bound(pos.begin(), pos.end(), std::make_pair(a, uint32_t(0)));
    if (it == pos.end()) {  // above max finite: compare with max and the virtual next value
      const auto& mx = pos.back();
      const double dlo = a - mx.first, dhi = beyond - a;
      if (dlo < dhi || (dlo == dhi && (mx.second & 1) == 0)) return s | mx.second;
      return -1;
    }
    if (it->first == a || it == pos.begin()) return s | it->second;
    const auto& hi = *it;
    const auto& lo = *(it - 1);
    const double dlo = a - lo.first, dhi = hi.first - a;
    if (dlo < dhi) return s | lo.second;
    if (dhi < dlo) return s | hi.second;
    return s | ((lo.second & 1) == 0 ? lo.second : hi.second);
  }
};

// Test inputs: log-uniform magnitudes from far below the smallest subnormal to far above max, random
// fp32 bit patterns, and exact midpoints between adjacent codes (the tie cases).
std::vector<float> test_inputs(const NearestEncoder& enc, double lo_exp, double hi_exp, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> ue(lo_exp, hi_exp);
  std::vector<float> x;
  for (int i = 0; i < 80000; ++i) {
    const double m = std::exp2(ue(rng));
    x.push_back(float(rng() & 1 ? -m : m));
  }
  for (int i = 0; i < 20000; ++i) {
    const float f = bits_f32(uint32_t(rng()));
    if (!std::isnan(f)) x.push_back(f);
  }
  for (size_t i = 0; i + 1 < enc.pos.size(); ++i) {
    const double mid = 0.5 * (enc.pos[i].first + enc.pos[i + 1].first);
    if (double(float(mid)) == mid) {
      x.push_back(float(mid));
      x.push_back(-float(mid));
      x.push_back(std::nextafter(float(mid), 0.0f));
      x.push_back(std::nextafter(float(mid), 1e30f));
    }
  }
  const double mx = enc.pos.back().first, mid_over = 0.5 * (mx + enc.beyond);
  for (double v : {mx, mid_over, std::nextafter(mid_over, 0.0), std::nextafter(mid_over, 1e300), enc.beyond,
                   2 * enc.beyond, 0.0, -0.0, 1e-30, double(std::numeric_limits<float>::max())})
    x.push_back(float(v)), x.push_back(-float(v));
  return x;
}

template <class EncodeFn>
void check_encoder(const NearestEncoder& enc, const std::vector<float>& inputs, EncodeFn encode, uint32_t overflow_code,
                   const char* what) {
  int failures = 0;
  for (float f : inputs) {
    const int64_t want = enc.nearest(double(f));
    const uint32_t sign = std::signbit(f) ? enc.sign_bit : 0;
    const uint32_t expect = want < 0 ? (sign | overflow_code) : uint32_t(want);
    const uint32_t got = encode(f);
    if (got != expect && ++failures <= 10)
      ADD_FAILURE() << what << ": encode(" << std::hexfloat << f << std::defaultfloat << " = " << f << ") = 0x"
                    << std::hex << got << ", nearest code 0x" << expect;
  }
  EXPECT_EQ(failures, 0) << what;
}

const NearestEncoder& e4m3_enc() {
  // E4M3's code after max (S.1111.111) is NaN; with an unbounded exponent it would be 480 (odd mantissa).
  static const NearestEncoder e(e4m3_formula, 256, 480.0);
  return e;
}
const NearestEncoder& e5m2_enc() {
  static const NearestEncoder e(e5m2_formula, 256, 65536.0);
  return e;
}
const NearestEncoder& f16_enc() {
  static const NearestEncoder e(f16_formula, 65536, 65536.0);
  return e;
}

TEST(Fp8, E4M3EncodeIsNearestEvenSaturating) {
  const auto x = test_inputs(e4m3_enc(), -14, 12, 1);
  // Saturating (the fp8_e4m3 type): beyond max finite (incl. inf) -> +-448 (0x7e).
  check_encoder(e4m3_enc(), x, [](float f) { return uint32_t(fp8_e4m3(f).bits); }, 0x7e, "E4M3 saturating");
  // Every overflow must land on max finite, whatever the magnitude.
  EXPECT_EQ(fp8_e4m3(1e30f).bits, 0x7e);
  EXPECT_EQ(fp8_e4m3(-std::numeric_limits<float>::infinity()).bits, 0xfe);
  EXPECT_EQ(fp8_e4m3(std::numeric_limits<float>::infinity()).bits, 0x7e);
  // Non-saturating: overflow is NaN (E4M3 has no inf).
  check_encoder(e4m3_enc(), x, [](float f) { return encode_small_float(f, kE4M3, false); }, 0x7f,
                "E4M3 non-saturating");
}

TEST(Fp8, E5M2EncodeIsNearestEvenSaturating) {
  const auto x = test_inputs(e5m2_enc(), -20, 20, 2);
  check_encoder(e5m2_enc(), x, [](float f) { return uint32_t(fp8_e5m2(f).bits); }, 0x7b, "E5M2 saturating");
  EXPECT_EQ(fp8_e5m2(std::numeric_limits<float>::infinity()).bits, 0x7b);
  EXPECT_EQ(fp8_e5m2(-1e30f).bits, 0xfb);
  // Non-saturating (IEEE): overflow is inf.
  check_encoder(e5m2_enc(), x, [](float f) { return encode_small_float(f, kE5M2, false); }, 0x7c,
                "E5M2 non-saturating");
  EXPECT_EQ(encode_small_float(std::numeric_limits<float>::infinity(), kE5M2, false), 0x7cu);
}

TEST(Fp8, NanEncodesToNan) {
  for (float nan : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                    bits_f32(0x7f800001u)}) {
    EXPECT_TRUE(std::isnan(float(fp8_e4m3(nan)))) << fp8_e4m3(nan).bits;
    EXPECT_TRUE(std::isnan(float(fp8_e5m2(nan)))) << fp8_e5m2(nan).bits;
    EXPECT_TRUE(std::isnan(float(f16(nan))));
    EXPECT_TRUE(std::isnan(float(bf16(nan))));
  }
}

TEST(F16, EncodeIsNearestEvenOverflowToInf) {
  const auto x = test_inputs(f16_enc(), -30, 20, 3);
  check_encoder(f16_enc(), x, [](float f) { return uint32_t(f16(f).bits); }, 0x7c00, "f16");
  EXPECT_EQ(f16(65519.0f).bits, 0x7bffu);  // just below the max tie
  EXPECT_EQ(f16(65520.0f).bits, 0x7c00u);  // the tie rounds to even: inf
  EXPECT_EQ(f16(std::ldexp(1.0f, -25)).bits, 0x0000u);                      // half the smallest subnormal: tie -> 0
  EXPECT_EQ(f16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)).bits, 0x0001u);  // just above: smallest subnormal
}

// ---------------------------------------------------------------------------------------------------
// bf16: independent RNE in double. q = |f| / quantum is exact (a power-of-two scale of a float), its
// fraction decides the rounding; values that round to 2^128 overflow to inf.
uint16_t bf16_rne_reference(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(double(f));
  if (std::isinf(a)) return sign | 0x7f80;
  if (a == 0.0) return sign;
  int e = std::ilogb(a);          // floor(log2 a)
  e = std::max(e, -126);          // bf16 shares fp32's exponent range; subnormal quantum 2^-133
  const double quantum = std::ldexp(1.0, e - 7);
  const double q = a / quantum;
  double fl = std::floor(q);
  const double frac = q - fl;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(fl, 2.0) == 1.0)) fl += 1.0;
  const double r = fl * quantum;
  if (r >= std::ldexp(1.0, 128)) return sign | 0x7f80;
  return sign | uint16_t(f32_bits(float(r)) >> 16);  // r is a bf16 value, exact in fp32
}

TEST(Bf16, EncodeMatchesDoubleRne) {
  std::mt19937_64 rng(4);
  std::vector<float> x;
  for (int i = 0; i < 100000; ++i) x.push_back(bits_f32(uint32_t(rng())));
  for (int i = 0; i < 20000; ++i) x.push_back(bits_f32((uint32_t(rng()) & 0xffff0000u) | 0x8000u));  // ties
  for (uint32_t b : {0x7f7fffffu, 0x7f7f8000u, 0x7f7f7fffu, 0x00000001u, 0x00008000u, 0x00018000u, 0x80000000u,
                     0x3f808000u, 0x3f818000u, 0x7f800000u, 0xff800000u})
    x.push_back(bits_f32(b));
  int failures = 0;
  for (float f : x) {
    const uint16_t got = bf16(f).bits;
    if (std::isnan(f)) {
      const bool ok = (got & 0x7f80) == 0x7f80 && (got & 0x7f) != 0 && (got >> 15) == (f32_bits(f) >> 31);
      if (!ok && ++failures <= 10) ADD_FAILURE() << std::hex << "NaN 0x" << f32_bits(f) << " -> 0x" << got;
      continue;
    }
    const uint16_t want = bf16_rne_reference(f);
    if (got != want && ++failures <= 10)
      ADD_FAILURE() << std::hex << "bf16(0x" << f32_bits(f) << ") = 0x" << got << ", RNE gives 0x" << want;
  }
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(bf16(1.0f + std::ldexp(1.0f, -8)).bits, 0x3f80u);                      // tie, even stays
  EXPECT_EQ(bf16(1.0f + 3 * std::ldexp(1.0f, -8)).bits, 0x3f82u);                  // tie, odd rounds up
  EXPECT_EQ(bf16(std::numeric_limits<float>::max()).bits, 0x7f80u);               // overflows to inf
  EXPECT_EQ(float(bf16(3.140625f)), 3.140625f);
}

// ---------------------------------------------------------------------------------------------------
TEST(DType, NamesSizesAndParsing) {
  const std::pair<DType, size_t> all[] = {{DType::f32, 4},  {DType::bf16, 2}, {DType::f16, 2}, {DType::e4m3, 1},
                                          {DType::e5m2, 1}, {DType::i32, 4},  {DType::i64, 8}};
  for (auto [t, size] : all) {
    EXPECT_EQ(dtype_size(t), size) << dtype_name(t);
    EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  }
  EXPECT_EQ(parse_dtype("fp32"), DType::f32);
  EXPECT_EQ(parse_dtype("float32"), DType::f32);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(parse_dtype("fp16"), DType::f16);
  EXPECT_TRUE(is_float(DType::e4m3));
  EXPECT_FALSE(is_float(DType::i64));
  EXPECT_EQ(dtype_of<bf16>(), DType::bf16);
  EXPECT_EQ(dtype_of<fp8_e5m2>(), DType::e5m2);
}

TEST(DType, ParseUnknownThrowsNamingAllowedValues) {
  for (const char* bad : {"", "float", "F32", "fp8", "int8", "bf16 "}) {
    try {
      parse_dtype(bad);
      ADD_FAILURE() << "'" << bad << "' parsed";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("allowed"), std::string::npos) << msg;
      EXPECT_NE(msg.find("bf16"), std::string::npos) << msg;
      EXPECT_NE(std::string(e.where()).find("dtype.cpp:"), std::string::npos) << e.where();  // kept apart from the message
    }
  }
}

}  // namespace
}  // namespace tessel
