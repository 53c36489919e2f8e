#include "tessel/ckpt/safetensors_header.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>
#include <optional>

#include "tessel/core/check.h"
#include "tessel/data/json_text.h"

namespace tessel::ckpt {

namespace {

using nlohmann::json;

constexpr DType kDTypes[] = {DType::f32, DType::bf16, DType::f16, DType::e4m3, DType::e5m2, DType::i32, DType::i64};

// Values quoted in messages are shortened, so a huge array cannot flood a message.
std::string shortened(std::string s) {
  constexpr size_t kMax = 60;
  if (s.size() > kMax) s = s.substr(0, kMax - 3) + "...";
  return s;
}

// A JSON value as it appears in the file.
std::string brief(const json& v) { return shortened(v.dump(-1, ' ', false, json::error_handler_t::replace)); }

std::string brief(const Shape& shape) { return shortened(shape_str(shape)); }

std::string kind_of(const json& v) {
  switch (v.type()) {
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::null: return "null";
    default: return "a number";
  }
}

// A JSON integer in [0, 2^63); nothing for fractions, negatives, larger integers and non-numbers.
std::optional<int64_t> non_negative_int(const json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u <= uint64_t(std::numeric_limits<int64_t>::max())) return int64_t(u);
  } else if (v.is_number_integer()) {
    const auto i = v.get<int64_t>();
    if (i >= 0) return i;
  }
  return std::nullopt;
}

const json& field(const json& entry, const char* key, const std::string& source, const std::string& name) {
  const auto it = entry.find(key);
  TESSEL_CHECK(it != entry.end(), "{}: tensor '{}' has no '{}'", source, name, key);
  return *it;
}

DType parse_dtype(const json& v, const std::string& source, const std::string& name) {
  TESSEL_CHECK(v.is_string(), "{}: tensor '{}': 'dtype' must be a string such as \"F32\", not {}", source, name,
               brief(v));
  const auto& s = v.get_ref<const std::string&>();
  for (DType t : kDTypes)
    if (safetensors_dtype_name(t) == s) return t;
  TESSEL_FAIL("{}: tensor '{}' has dtype '{}' (supported: F32, BF16, F16, F8_E4M3, F8_E5M2, I32, I64)", source, name,
              s);
}

// The shape, and its byte size for dtype; element and byte counts are computed with overflow checks
// (a zero dimension does not excuse an overflowing product of the others: strides would overflow).
Shape parse_shape(const json& v, DType dtype, int64_t& bytes, const std::string& source, const std::string& name) {
  Shape shape;
  bool ok = v.is_array();
  for (size_t i = 0; ok && i < v.size(); ++i) {
    const auto d = non_negative_int(v[i]);
    ok = d.has_value();
    if (ok) shape.push_back(*d);
  }
  TESSEL_CHECK(ok, "{}: tensor '{}': 'shape' must be an array of non-negative integers, not {}", source, name,
               brief(v));
  int64_t nonzero_product = 1;
  for (int64_t d : shape)
    TESSEL_CHECK(d == 0 || !__builtin_mul_overflow(nonzero_product, d, &nonzero_product),
                 "{}: tensor '{}': shape {} has more elements than a 64-bit count holds", source, name, brief(shape));
  const int64_t numel = std::count(shape.begin(), shape.end(), 0) ? 0 : nonzero_product;
  TESSEL_CHECK(!__builtin_mul_overflow(numel, int64_t(dtype_size(dtype)), &bytes),
               "{}: tensor '{}': shape {} of {} has more bytes than a 64-bit size holds", source, name, brief(shape),
               safetensors_dtype_name(dtype));
  return shape;
}

void parse_offsets(const json& v, int64_t bytes, int64_t data_bytes, SafetensorsEntry& e, const std::string& source) {
  std::optional<int64_t> b, end;
  if (v.is_array() && v.size() == 2) {
    b = non_negative_int(v[0]);
    end = non_negative_int(v[1]);
  }
  TESSEL_CHECK(b && end, "{}: tensor '{}': 'data_offsets' must be [begin, end] (two non-negative integers), not {}",
               source, e.name, brief(v));
  TESSEL_CHECK(*b <= *end, "{}: tensor '{}': data_offsets [{}, {}] begin after they end", source, e.name, *b, *end);
  TESSEL_CHECK(*end <= data_bytes, "{}: tensor '{}': data_offsets [{}, {}] run past the end of the data section ({} bytes)",
               source, e.name, *b, *end, data_bytes);
  TESSEL_CHECK(*end - *b == bytes, "{}: tensor '{}': data_offsets [{}, {}] hold {} bytes, but shape {} of {} needs {}",
               source, e.name, *b, *end, *end - *b, brief(e.shape), safetensors_dtype_name(e.dtype), bytes);
  e.begin = *b;
  e.end = *end;
}

void parse_metadata(const json& v, std::map<std::string, std::string>& out, const std::string& source) {
  TESSEL_CHECK(v.is_object(), "{}: '__metadata__' must be an object of string values, not {}", source, brief(v));
  for (const auto& [key, value] : v.items()) {
    TESSEL_CHECK(value.is_string(), "{}: '__metadata__' key '{}' must be a string, not {}", source, key, brief(value));
    out[key] = value.get<std::string>();
  }
}

}  // namespace

std::string safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::e4m3: return "F8_E4M3";
    case DType::e5m2: return "F8_E5M2";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
  }
  return "?";
}

SafetensorsHeader parse_safetensors_header(std::string_view text, int64_t data_bytes, const std::string& source) {
  std::string problem;
  const std::optional<json> parsed = data::parse_json(text, problem);
  TESSEL_CHECK(parsed, "{}: header is not valid JSON ({})", source, problem);
  const json& j = *parsed;
  TESSEL_CHECK(j.is_object(), "{}: header is not a JSON object (it is {})", source, kind_of(j));
  SafetensorsHeader h;
  for (const auto& [name, entry] : j.items()) {
    if (name == "__metadata__") {
      parse_metadata(entry, h.metadata, source);
      continue;
    }
    TESSEL_CHECK(entry.is_object(), "{}: tensor '{}' is not an object with dtype, shape and data_offsets (it is {})",
                 source, name, kind_of(entry));
    SafetensorsEntry e{name, parse_dtype(field(entry, "dtype", source, name), source, name), {}, 0, 0};
    int64_t bytes = 0;
    e.shape = parse_shape(field(entry, "shape", source, name), e.dtype, bytes, source, name);
    parse_offsets(field(entry, "data_offsets", source, name), bytes, data_bytes, e, source);
    h.entries.push_back(std::move(e));
  }
  std::stable_sort(h.entries.begin(), h.entries.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
  return h;
}

}  // namespace tessel::ckpt
