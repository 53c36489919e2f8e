#include "tessel/train/config_yaml.h"

#include <algorithm>

#include <yaml-cpp/depthguard.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string_view>

#include "tessel/core/check.h"
#include "tessel/core/utf8.h"

namespace tessel::train {

YAML::Node parse_config_yaml(const std::string& text, const std::string& origin) {
  try {
    return YAML::Load(text);
  } catch (const YAML::DeepRecursion& e) {
    // yaml-cpp's own text for this is "bad file".
    TESSEL_FAIL("{}: line {}: YAML nested more than {} levels deep (a config nests at most three: section, "
                "precision.fp8, key)", origin, e.mark.line + 1, e.depth());
  } catch (const YAML::Exception& e) {
    TESSEL_FAIL("{}: not valid YAML: {}", origin, e.what());
  }
}

namespace {

// The value as a finite double when the whole text is a number (strtod's forms), else NaN.
double as_plain_number(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  return end != text.c_str() && *end == '\0' ? v : std::numeric_limits<double>::quiet_NaN();
}

// YAML's integer forms: 12, -12, +12, 0x0c, 0o14; true when `text` is one that fits in int64.
bool parse_yaml_integer(const std::string& text, int64_t& out) {
  std::string_view t = text;
  bool negative = false;
  if (!t.empty() && (t[0] == '+' || t[0] == '-')) {
    negative = t[0] == '-';
    t.remove_prefix(1);
  }
  int base = 10;
  if (t.size() > 2 && t[0] == '0' && (t[1] == 'x' || t[1] == 'o')) {
    base = t[1] == 'x' ? 16 : 8;
    t.remove_prefix(2);
  }
  uint64_t magnitude = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), magnitude, base);
  if (t.empty() || ec != std::errc() || end != t.data() + t.size()) return false;
  const uint64_t limit = uint64_t(std::numeric_limits<int64_t>::max()) + (negative ? 1 : 0);
  if (magnitude > limit) return false;
  out = negative ? int64_t(0 - magnitude) : int64_t(magnitude);
  return true;
}

}  // namespace

void read_scalar(const YAML::Node& n, const std::string& key, int64_t& out) {
  const std::string text = n.Scalar();
  if (parse_yaml_integer(text, out)) return;
  // A whole number written as a float (64.0, 4e6) is exact below 2^53; a fraction is not an integer.
  const double v = as_plain_number(text);
  TESSEL_CHECK(std::isfinite(v) && v == std::trunc(v), "{}: '{}' is not an integer", key, text);
  constexpr double kExact = 9007199254740992.0;  // 2^53
  TESSEL_CHECK(std::fabs(v) < kExact, "{}: '{}' is out of range for an integer", key, text);
  out = int64_t(v);
}

void read_scalar(const YAML::Node& n, const std::string& key, double& out) {
  TESSEL_CHECK(YAML::convert<double>::decode(n, out), "{}: '{}' is not a number", key, n.Scalar());
  TESSEL_CHECK(std::isfinite(out), "{}: '{}' is not a finite number", key, n.Scalar());
}

void read_scalar(const YAML::Node& n, const std::string& key, bool& out) {
  TESSEL_CHECK(YAML::convert<bool>::decode(n, out), "{}: '{}' is not a boolean (true/false)", key, n.Scalar());
}

void read_scalar(const YAML::Node& n, const std::string& key, std::string& out) {
  out = n.Scalar();
  // Names, paths and lists are one line of text: a line break or another control character is a
  // mistake, and one the resolved config.yaml could not write back as it was read.
  const auto bad = std::find_if(out.begin(), out.end(), [](char c) { return (unsigned char)c < 0x20 || c == 0x7f; });
  TESSEL_CHECK(bad == out.end(), "{} must be one line of text; it holds a control character (code {}) at position {}",
               key, int((unsigned char)*bad), bad - out.begin());
  // And UTF-8, as YAML is: an ill-formed sequence (C0 80, an overlong NUL) would be written back as
  // something else (the emitter's escape of what it decodes), which then reads differently.
  const int64_t at = invalid_utf8_at(out);
  TESSEL_CHECK(at < 0, "{} must be UTF-8 text; the byte 0x{:02X} at position {} does not begin a well-formed sequence",
               key, at < 0 ? 0 : int((unsigned char)out[size_t(at)]), at);
}

void KeyLines::add(const std::string& key, const YAML::Node& key_node) {
  const int line = key_node.Mark().line + 1;
  const auto [it, fresh] = first_line_.emplace(key, line);
  TESSEL_CHECK(fresh, "{}: line {}: duplicate key '{}' (first at line {}; each key may appear once)", origin_, line,
               key, it->second);
}

}  // namespace tessel::train
