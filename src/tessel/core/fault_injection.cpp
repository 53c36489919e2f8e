#include "tessel/core/fault_injection.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace tessel {

void fault_point(std::string_view site, int rank) {
  const char* v = std::getenv("TESSEL_INJECT_FAULT");
  if (!v) return;
  const std::string spec(v);
  if (spec != std::string(site) + ":" + std::to_string(rank)) return;
  std::fprintf(stderr, "TESSEL_INJECT_FAULT: rank %d killed at %.*s\n", rank, int(site.size()), site.data());
  std::fflush(stderr);
  std::raise(SIGKILL);
}

}  // namespace tessel
