#include "tessel/core/machine_memory.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "tessel/core/check.h"

namespace tessel {
namespace {

// A cgroup limit file's value; 0 when absent or unlimited ("max", or v1's near-2^63 sentinel).
uint64_t cgroup_limit(const char* path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return 0;
  try {
    const uint64_t v = std::stoull(text);
    return v >= (uint64_t(1) << 62) ? 0 : v;
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace

uint64_t machine_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  uint64_t bytes = pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : UINT64_MAX;
  for (const char* f : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"})
    if (const uint64_t limit = cgroup_limit(f); limit > 0) bytes = std::min(bytes, limit);
  return bytes;
}

void check_fits_in_memory(double bytes, const std::string& what, const std::string& detail, const std::string& advice) {
  const double have = double(machine_memory_bytes());
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  TESSEL_CHECK(bytes <= have, "{} needs {:.1f} GiB ({}), more than the {:.1f} GiB of memory here; {}", what,
               bytes / kGiB, detail, have / kGiB, advice);
}

}  // namespace tessel
