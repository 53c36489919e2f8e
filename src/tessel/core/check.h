#pragma once
// Errors: TESSEL_CHECK(cond, fmt, args...) throws tessel::Error(message). The message is what a user
// reads; the source location (src/tessel/...cpp:NN) travels separately in where(), and the CLI
// prints it only when asked (--verbose, TESSEL_VERBOSE=1, or a debug build).
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace tessel {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, std::string where = {})
      : std::runtime_error(message), where_(std::move(where)) {}
  // "src/tessel/train/config.cpp:123", or empty when thrown without a location.
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

[[noreturn]] void throw_error(const char* file, int line, const std::string& msg);

}  // namespace tessel

#define TESSEL_CHECK(cond, ...)                                                       \
  do {                                                                                \
    if (!(cond)) ::tessel::throw_error(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
  } while (0)

#define TESSEL_FAIL(...) ::tessel::throw_error(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__))

// Range checks of named settings (integers or numbers): "NAME must be in [LO, HI], got V" and
// "NAME must be >= LO, got V".
#define TESSEL_CHECK_RANGE(name, v, lo, hi) \
  TESSEL_CHECK((v) >= (lo) && (v) <= (hi), "{} must be in [{}, {}], got {}", name, lo, hi, v)
#define TESSEL_CHECK_MIN(name, v, lo) TESSEL_CHECK((v) >= (lo), "{} must be >= {}, got {}", name, lo, v)
