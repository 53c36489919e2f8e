#pragma once
// A device allocator's BlockPool that can be started afresh while blocks of the earlier pool are
// still in use: the earlier pool is retired (its segments with nothing in use go back to the
// backing at once), takes its blocks back as they are freed, and is deleted when the last one is.
// A measurement that starts a fresh pool (train::measure_training_step, tessel bench) then sees
// what a new process would see, whatever ran before it in this one: the pool's choices depend on
// its history of requests, and the reserve it reaches is what the measurement reports.
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "tessel/core/block_pool.h"

namespace tessel {

class PoolGenerations {
 public:
  PoolGenerations(size_t min_cap_bytes, BlockPool::Backing backing);

  void* get(size_t nbytes);          // from the current pool; nullptr when the backing fails
  void put(void* p, size_t nbytes);  // to whichever pool handed p out
  void start_fresh();                // retires the current pool (above)
  void release_idle();               // every pool's segments with nothing in use go back
  BlockPoolStats current_stats() const;
  // Every pool's counts added up (bytes, blocks, segments, requests); the peaks and the cap are the
  // current pool's.
  BlockPoolStats stats() const;
  // Bytes every pool holds from the backing, and of those not in use (free blocks kept).
  size_t segment_bytes() const;
  size_t cached_bytes() const;

 private:
  std::unique_ptr<BlockPool> fresh() const { return std::make_unique<BlockPool>(min_cap_, backing_); }

  size_t min_cap_;
  BlockPool::Backing backing_;
  mutable std::mutex mu_;  // guards the pointers below; each pool locks itself
  std::unique_ptr<BlockPool> current_;
  std::vector<std::unique_ptr<BlockPool>> retired_;
};

}  // namespace tessel
