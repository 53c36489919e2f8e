#pragma once
// Element types and exact conversions between fp32 and the narrow floating-point storage formats.
//
// Every narrow format converts from fp32 with round-to-nearest-even. bf16 and f16 follow IEEE (overflow
// to inf). The fp8 formats follow the OCP FP8 spec: E4M3 (bias 7, no infinities, max 448, NaN =
// S.1111.111) and E5M2 (bias 15, IEEE-like, max 57344); training casts saturate to the max finite value.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace tessel {

enum class DType : uint8_t { f32, bf16, f16, e4m3, e5m2, i32, i64 };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);
DType parse_dtype(std::string_view name);  // throws tessel::Error naming the allowed values
bool is_float(DType t);

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// bf16: the upper half of an fp32.
struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  explicit bf16(float f) : bits(from_f32(f)) {}
  operator float() const { return bits_f32(uint32_t(bits) << 16); }
  static uint16_t from_f32(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN, keep sign
    u += 0x7fffu + ((u >> 16) & 1u);                                         // round to nearest even
    return uint16_t(u >> 16);
  }
};

// Generic encoder/decoder for small binary floating-point formats (used for f16 and fp8).
struct FloatFormat {
  int exp_bits;
  int man_bits;
  int bias;
  bool ieee_inf;  // true: all-ones exponent is inf/NaN (IEEE, E5M2, f16); false: E4M3 (only S.1111.111 is NaN)
  double max_finite() const;
};
inline constexpr FloatFormat kF16{5, 10, 15, true};
inline constexpr FloatFormat kE4M3{4, 3, 7, false};
inline constexpr FloatFormat kE5M2{5, 2, 15, true};

// Round-to-nearest-even encode. saturate: values beyond max finite (and inf) become +-max finite;
// otherwise they become inf (IEEE formats) or NaN (E4M3). NaN always encodes to NaN.
uint32_t encode_small_float(float f, const FloatFormat& fmt, bool saturate);
float decode_small_float(uint32_t bits, const FloatFormat& fmt);

struct f16 {
  uint16_t bits = 0;
  f16() = default;
  explicit f16(float f) : bits(uint16_t(encode_small_float(f, kF16, false))) {}
  operator float() const { return decode_small_float(bits, kF16); }
};

// fp8 decode goes through a 256-entry table; encode saturates (training casts).
float e4m3_to_f32(uint8_t b);
float e5m2_to_f32(uint8_t b);
struct fp8_e4m3 {
  uint8_t bits = 0;
  fp8_e4m3() = default;
  explicit fp8_e4m3(float f) : bits(uint8_t(encode_small_float(f, kE4M3, true))) {}
  operator float() const { return e4m3_to_f32(bits); }
};
struct fp8_e5m2 {
  uint8_t bits = 0;
  fp8_e5m2() = default;
  explicit fp8_e5m2(float f) : bits(uint8_t(encode_small_float(f, kE5M2, true))) {}
  operator float() const { return e5m2_to_f32(bits); }
};

template <class T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<bf16>() { return DType::bf16; }
template <> constexpr DType dtype_of<f16>() { return DType::f16; }
template <> constexpr DType dtype_of<fp8_e4m3>() { return DType::e4m3; }
template <> constexpr DType dtype_of<fp8_e5m2>() { return DType::e5m2; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }

}  // namespace tessel
