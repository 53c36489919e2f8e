#pragma once
// Range checks for numeric command-line options, as CLI11 validators: a value out of range is a
// usage error (exit status 2) whose message names the option, the allowed range and the value,
// e.g. "--batch: must be an integer >= 1, got 0".
#include <CLI/CLI.hpp>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace tessel::app {

// The most ranks a layout command (plan, dry-run) takes: setting a layout up is linear in the
// ranks, and 2^31 of them would run for hours before the layout could be refused.
inline constexpr int64_t kMaxWorld = int64_t(1) << 20;

// `text` as a plain decimal integer: an optional '-', then digits without a leading zero. CLI11
// converts with strtoll in base 0, so "+0", "0x1f" and "010" (octal 8) would reach it as other
// values than a reader sees (or than a check made with from_chars saw); they are refused here.
inline bool plain_decimal(const std::string& text, int64_t& v) {
  const size_t digits = text.size() > 0 && text[0] == '-' ? 1 : 0;
  if (text.size() <= digits || (text[digits] == '0' && text.size() > digits + 1)) return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  return ec == std::errc() && end == text.data() + text.size();
}

inline constexpr const char* kPlainDecimal = " in plain decimal (digits, an optional '-', no leading zero), got ";

// Integers >= min, written in plain decimal.
inline CLI::Validator integer_at_least(int64_t min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        int64_t v = 0;
        if (!plain_decimal(text, v)) return "must be an integer >= " + std::to_string(min) + kPlainDecimal + text;
        return v >= min ? "" : "must be an integer >= " + std::to_string(min) + ", got " + text;
      },
      "INT>=" + std::to_string(min));
}

// A seed: a plain decimal integer from 0 to 2^64 - 1 (CLI11 would wrap "-1" and anything past
// 2^64 to 2^64 - 1 silently).
inline CLI::Validator unsigned_64() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        uint64_t v = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        const bool plain = !text.empty() && (text[0] != '0' || text.size() == 1);
        if (plain && ec == std::errc() && end == text.data() + text.size()) return "";
        return "must be an integer from 0 to 18446744073709551615 in plain decimal, got " + text;
      },
      "UINT64");
}

// `text` as a whole number in strtod's syntax; text that is not one is left to CLI11's conversion
// error (these validators only judge the value).
inline bool parses_as_number(const std::string& text, double& v) {
  char* end = nullptr;
  v = std::strtod(text.c_str(), &end);
  return end != text.c_str() && *end == '\0';
}

// Finite numbers >= 0 (costs, durations).
inline CLI::Validator finite_non_negative() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double v = 0;
        if (!parses_as_number(text, v) || (std::isfinite(v) && v >= 0)) return "";
        return "must be a finite number >= 0, got " + text;
      },
      "NUMBER>=0");
}

// Integers in [min, max]: a bound where a larger value would only make the command run for hours
// or exhaust memory (ranks, steps) before any other check could refuse it.
inline CLI::Validator integer_in(int64_t min, int64_t max) {
  return CLI::Validator(
      [min, max](std::string& text) -> std::string {
        int64_t v = 0;
        const std::string range = "must be an integer from " + std::to_string(min) + " to " + std::to_string(max);
        if (!plain_decimal(text, v)) return range + kPlainDecimal + text;
        return v >= min && v <= max ? "" : range + ", got " + text;
      },
      "INT in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
}

// Finite numbers in [min, max] (costs whose sums must stay finite, durations a clock can hold).
inline CLI::Validator finite_in(double min, double max) {
  return CLI::Validator(
      [min, max](std::string& text) -> std::string {
        double v = 0;
        if (!parses_as_number(text, v) || (std::isfinite(v) && v >= min && v <= max)) return "";
        char range[96];
        std::snprintf(range, sizeof range, "%g to %g", min, max);
        return "must be a finite number from " + std::string(range) + ", got " + text;
      },
      "NUMBER");
}

// Finite numbers > 0 (a memory size: 0 would read as "no limit" or "nothing fits").
inline CLI::Validator finite_positive() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double v = 0;
        if (!parses_as_number(text, v) || (std::isfinite(v) && v > 0)) return "";
        return "must be a finite number > 0, got " + text;
      },
      "NUMBER>0");
}

// A comma-separated list given as one argument ("block,current"): no item may be empty.
inline CLI::Validator comma_separated_items() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const bool empty_item = text.empty() || text.front() == ',' || text.back() == ',' ||
                                text.find(",,") != std::string::npos;
        return empty_item ? "an empty item in the comma-separated list '" + text + "'" : "";
      },
      "LIST");
}

}  // namespace tessel::app
