#pragma once
// Range checks for numeric command-line options, as CLI11 validators: a value out of range is a
// usage error (exit status 2) whose message names the option, the allowed range and the value,
// e.g. "--batch: must be an integer >= 1, got 0".
#include <CLI/CLI.hpp>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace tessel::app {

// Integers >= min (text that is not an integer is left to CLI11's conversion error).
inline CLI::Validator integer_at_least(int64_t min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        int64_t v = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec != std::errc() || end != text.data() + text.size() || v >= min) return "";
        return "must be an integer >= " + std::to_string(min) + ", got " + text;
      },
      "INT>=" + std::to_string(min));
}

// Finite numbers >= 0 (costs, durations).
inline CLI::Validator finite_non_negative() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0' || (std::isfinite(v) && v >= 0)) return "";
        return "must be a finite number >= 0, got " + text;
      },
      "NUMBER>=0");
}

}  // namespace tessel::app
