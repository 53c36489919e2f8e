#include "tessel/ckpt/json_fields.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tessel/core/check.h"

namespace tessel::ckpt {

namespace {

// A value as it appears in the file, shortened: the message must stay one readable line.
std::string shown(const nlohmann::json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

// nlohmann's messages start with "[json.exception.parse_error.101] parse error at line 1, column 2: ";
// keep the position and the reason, drop the library's tag.
std::string without_library_tag(const std::string& what) {
  const size_t close = what.find("] ");
  return what.rfind("[json.exception.", 0) == 0 && close != std::string::npos ? what.substr(close + 2) : what;
}

std::string fmt_bound(double v) { return fmt::format("{}", v); }

}  // namespace

nlohmann::json parse_json_text(const std::string& text, const std::string& source, const std::string& context) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    TESSEL_FAIL("{}: {} is not valid JSON: {}", context, source, without_library_tag(e.what()));
  }
}

nlohmann::json read_json_file(const std::string& path, const std::string& context) {
  namespace fs = std::filesystem;
  std::error_code ec;
  TESSEL_CHECK(fs::exists(path, ec), "{}: {} does not exist", context, path);
  TESSEL_CHECK(fs::is_regular_file(path, ec), "{}: {} is not a regular file", context, path);
  std::ifstream in(path, std::ios::binary);
  TESSEL_CHECK(in.good(), "{}: {} cannot be read", context, path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_json_text(ss.str(), path, context);
}

JsonFields::JsonFields(const nlohmann::json& obj, std::string where) : obj_(obj), where_(std::move(where)) {
  TESSEL_CHECK(obj_.is_object(), "{} must hold a JSON object, got {}", where_, shown(obj_));
}

bool JsonFields::has(const std::string& key) const {
  const auto it = obj_.find(key);
  return it != obj_.end() && !it->is_null();
}

const nlohmann::json& JsonFields::raw(const std::string& key) const {
  TESSEL_CHECK(has(key), "{}: key '{}' is missing", where_, key);
  return obj_.at(key);
}

void JsonFields::wrong(const std::string& key, const std::string& expected) const {
  TESSEL_FAIL("{}: key '{}' must be {}, got {}", where_, key, expected, shown(obj_.at(key)));
}

const nlohmann::json& JsonFields::required(const std::string& key, const std::string& expected) const {
  TESSEL_CHECK(has(key), "{}: key '{}' is missing (expected {})", where_, key, expected);
  return obj_.at(key);
}

int64_t JsonFields::integer(const std::string& key, int64_t lo, int64_t hi) const {
  const std::string expected = fmt::format("an integer in [{}, {}]", lo, hi);
  const auto& v = required(key, expected);
  // Unsigned values past int64's range are stored as uint64 by nlohmann: compare before converting.
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi)) wrong(key, expected);
  if (!v.is_number_integer()) wrong(key, expected);
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) wrong(key, expected);
  return x;
}

int64_t JsonFields::integer_or(const std::string& key, int64_t fallback, int64_t lo, int64_t hi) const {
  return has(key) ? integer(key, lo, hi) : fallback;
}

double JsonFields::number(const std::string& key, double lo, double hi, bool lo_open) const {
  const std::string expected =
      fmt::format("a number in {}{}, {}]", lo_open ? "(" : "[", fmt_bound(lo), fmt_bound(hi));
  const auto& v = required(key, expected);
  if (!v.is_number()) wrong(key, expected);
  const double x = v.get<double>();
  if (!std::isfinite(x) || x > hi || x < lo || (lo_open && x == lo)) wrong(key, expected);
  return x;
}

double JsonFields::number_or(const std::string& key, double fallback, double lo, double hi, bool lo_open) const {
  return has(key) ? number(key, lo, hi, lo_open) : fallback;
}

std::string JsonFields::string(const std::string& key) const {
  const auto& v = required(key, "a string");
  if (!v.is_string()) wrong(key, "a string");
  return v.get<std::string>();
}

std::string JsonFields::string_or(const std::string& key, const std::string& fallback) const {
  return has(key) ? string(key) : fallback;
}

bool JsonFields::boolean_or(const std::string& key, bool fallback) const {
  if (!has(key)) return fallback;
  const auto& v = obj_.at(key);
  if (!v.is_boolean()) wrong(key, "true or false");
  return v.get<bool>();
}

JsonFields JsonFields::object(const std::string& key) const {
  const auto& v = required(key, "an object");
  if (!v.is_object()) wrong(key, "an object");
  return JsonFields(v, where_ + ": " + key);
}

}  // namespace tessel::ckpt
