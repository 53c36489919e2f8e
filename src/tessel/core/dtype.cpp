#include "tessel/core/dtype.h"

#include <array>
#include <cmath>
#include <limits>

#include "tessel/core/check.h"

namespace tessel {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::e4m3: return 1;
    case DType::e5m2: return 1;
    case DType::i32: return 4;
    case DType::i64: return 8;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::e4m3: return "e4m3";
    case DType::e5m2: return "e5m2";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::e4m3, DType::e5m2, DType::i32, DType::i64})
    if (dtype_name(t) == name) return t;
  if (name == "fp32" || name == "float32") return DType::f32;
  if (name == "bfloat16") return DType::bf16;
  if (name == "fp16" || name == "float16") return DType::f16;
  TESSEL_FAIL("unknown dtype '{}' (allowed: f32, bf16, f16, e4m3, e5m2, i32, i64)", name);
}

bool is_float(DType t) { return t != DType::i32 && t != DType::i64; }

double FloatFormat::max_finite() const {
  const int emax = (1 << exp_bits) - 1 - bias - (ieee_inf ? 1 : 0);
  // E4M3 reserves mantissa all-ones at the top exponent for NaN, so its largest mantissa is 2^m - 2.
  const double top_mant = ieee_inf ? (1 << man_bits) - 1 : (1 << man_bits) - 2;
  return std::ldexp(1.0 + top_mant / double(1 << man_bits), emax);
}

uint32_t encode_small_float(float f, const FloatFormat& fmt, bool saturate) {
  const uint32_t sign = (f32_bits(f) >> 31) << (fmt.exp_bits + fmt.man_bits);
  const uint32_t exp_all = (1u << fmt.exp_bits) - 1;
  const uint32_t man_all = (1u << fmt.man_bits) - 1;
  const uint32_t nan = fmt.ieee_inf ? (exp_all << fmt.man_bits) | (1u << (fmt.man_bits - 1))
                                    : (exp_all << fmt.man_bits) | man_all;
  const uint32_t inf = (exp_all << fmt.man_bits);
  if (std::isnan(f)) return sign | nan;
  const double maxf = fmt.max_finite();
  double x = std::fabs(double(f));
  const uint32_t max_bits = fmt.ieee_inf ? ((exp_all - 1) << fmt.man_bits) | man_all
                                         : (exp_all << fmt.man_bits) | (man_all - 1);
  auto overflow = [&]() -> uint32_t {
    if (saturate) return sign | max_bits;
    return sign | (fmt.ieee_inf ? inf : nan);
  };
  if (std::isinf(x)) return overflow();
  if (x == 0.0) return sign;
  const int emin = 1 - fmt.bias;  // exponent of the smallest normal
  int e;
  std::frexp(x, &e);  // x = m * 2^e, m in [0.5, 1)  =>  floor(log2 x) = e - 1
  int ex = std::max(e - 1, emin);
  const double quantum = std::ldexp(1.0, ex - fmt.man_bits);
  const double q = std::nearbyint(x / quantum);  // default rounding mode: to nearest, ties to even
  const double v = q * quantum;
  if (v > maxf) {
    // IEEE RNE: beyond max finite + half an ulp rounds to inf; exactly representable values above
    // max do not exist, so any v > maxf means x rounded past the largest finite value.
    return overflow();
  }
  if (v < std::ldexp(1.0, emin)) {  // subnormal (or rounded up to the smallest normal below)
    return sign | uint32_t(q);      // exponent field 0, mantissa = q
  }
  std::frexp(v, &e);
  ex = e - 1;
  const uint32_t man = uint32_t(std::ldexp(v, fmt.man_bits - ex)) - (1u << fmt.man_bits);
  return sign | (uint32_t(ex + fmt.bias) << fmt.man_bits) | man;
}

float decode_small_float(uint32_t bits, const FloatFormat& fmt) {
  const uint32_t exp_all = (1u << fmt.exp_bits) - 1;
  const uint32_t man_all = (1u << fmt.man_bits) - 1;
  const bool neg = (bits >> (fmt.exp_bits + fmt.man_bits)) & 1u;
  const uint32_t ex = (bits >> fmt.man_bits) & exp_all;
  const uint32_t man = bits & man_all;
  double v;
  if (fmt.ieee_inf && ex == exp_all) {
    v = man ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (!fmt.ieee_inf && ex == exp_all && man == man_all) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (ex == 0) {
    v = std::ldexp(double(man), 1 - fmt.bias - fmt.man_bits);
  } else {
    v = std::ldexp(1.0 + double(man) / double(1u << fmt.man_bits), int(ex) - fmt.bias);
  }
  return float(neg ? -v : v);
}

namespace {
std::array<float, 256> make_table(const FloatFormat& fmt) {
  std::array<float, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) t[i] = decode_small_float(i, fmt);
  return t;
}
}  // namespace

float e4m3_to_f32(uint8_t b) {
  static const std::array<float, 256> table = make_table(kE4M3);
  return table[b];
}
float e5m2_to_f32(uint8_t b) {
  static const std::array<float, 256> table = make_table(kE5M2);
  return table[b];
}

}  // namespace tessel
