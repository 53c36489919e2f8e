#include "tessel/core/check.h"

#include <cstring>

namespace tessel {

void throw_error(const char* file, int line, const std::string& msg) {
  // Keep only the path below src/ so locations do not depend on the build machine's checkout path.
  const char* rel = std::strstr(file, "src/tessel/");
  throw Error(msg, fmt::format("{}:{}", rel ? rel : file, line));
}

}  // namespace tessel
