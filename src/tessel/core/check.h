#pragma once
// Errors: TESSEL_CHECK(cond, fmt, args...) throws tessel::Error("file:line: message").
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace tessel {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_error(const char* file, int line, const std::string& msg);

}  // namespace tessel

#define TESSEL_CHECK(cond, ...)                                                       \
  do {                                                                                \
    if (!(cond)) ::tessel::throw_error(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
  } while (0)

#define TESSEL_FAIL(...) ::tessel::throw_error(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__))
