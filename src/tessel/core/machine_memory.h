#pragma once
// How much memory this process may use: the machine's physical memory, or the container's limit
// (cgroup v2 memory.max, v1 memory.limit_in_bytes) when that is lower. Used to refuse, with the
// figures, a model that cannot fit before allocating it.
#include <cstdint>
#include <string>

namespace tessel {

uint64_t machine_memory_bytes();

// Throws tessel::Error when `bytes` exceed machine_memory_bytes(): "`what` needs X GiB (`detail`),
// more than the Y GiB of memory here; `advice`".
void check_fits_in_memory(double bytes, const std::string& what, const std::string& detail, const std::string& advice);

}  // namespace tessel
