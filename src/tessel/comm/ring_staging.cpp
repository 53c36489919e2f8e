#include "tessel/comm/ring_staging.h"

#include <algorithm>
#include <atomic>

namespace tessel::comm {
namespace {
// 16 MiB. A ring reduction advances one message exchange each time a rank tests or waits on it, and
// backward tests its gradient buckets only now and then (optim/grad_reducer.cpp): with 4 MiB messages
// a 2-rank data-parallel step of llama-tiny left 0.020 s of its all-reduce exposed after backward,
// with 16 MiB 0.009 s, with Open MPI's own all-reduce 0.024 s (medians of 5 alternated runs,
// docs/perf.md). A data-parallel bucket's blocks are at most this on 2 ranks or more, so each phase
// of the ring is one exchange there, as in MPI's own algorithm, and the staging is one block.
constexpr int64_t kRingChunkBytes = int64_t(16) << 20;
std::atomic<int64_t> g_chunk_bytes{kRingChunkBytes};
}  // namespace

int64_t ring_chunk_bytes() { return g_chunk_bytes.load(std::memory_order_relaxed); }

void set_ring_chunk_bytes_for_testing(int64_t bytes) {
  g_chunk_bytes.store(bytes > 0 ? bytes : kRingChunkBytes, std::memory_order_relaxed);
}

std::vector<int64_t> ring_block_bounds(int64_t count, int ranks) {
  std::vector<int64_t> b(size_t(ranks) + 1);
  for (int r = 0; r <= ranks; ++r) b[size_t(r)] = count * r / ranks;
  return b;
}

std::vector<int64_t> ring_equal_block_bounds(int64_t each, int ranks) {
  std::vector<int64_t> b(size_t(ranks) + 1);
  for (int r = 0; r <= ranks; ++r) b[size_t(r)] = each * r;
  return b;
}

std::vector<int64_t> ring_counted_block_bounds(const std::vector<int64_t>& counts) {
  std::vector<int64_t> b{0};
  for (int64_t n : counts) b.push_back(b.back() + n);
  return b;
}

int64_t ring_largest_block(const std::vector<int64_t>& bounds) {
  int64_t largest = 0;
  for (size_t r = 0; r + 1 < bounds.size(); ++r) largest = std::max(largest, bounds[r + 1] - bounds[r]);
  return largest;
}

int ring_staging_buffers(int ranks, bool in_place) { return ranks <= 1 ? 0 : in_place || ranks == 2 ? 1 : 2; }

int64_t ring_staging_elements(int64_t largest_block, DType reduced) {
  const int64_t chunk = std::max<int64_t>(1, ring_chunk_bytes() / int64_t(dtype_size(reduced)));
  return std::min(largest_block, chunk);
}

}  // namespace tessel::comm
