#pragma once
// A pool of freed 64-byte aligned blocks for tensor storage. A training step allocates the same
// buffers in the same order every time, so after the first step nothing reaches the OS: without the
// pool, glibc returns large blocks with munmap and every step pays page faults and zeroing for its
// activations (the logits alone are 131 MB at vocab 32000).
//
// Requests are rounded up to size classes (64-byte multiples below 4 KiB, 8 classes per octave
// above), so buffers whose size changes from step to step (the rows each MoE expert gets) share
// blocks instead of adding one size each. The free blocks kept are capped: at most the larger of
// `min_cap_bytes` and the most bytes ever handed out at once (what a step needs back), the least
// recently returned blocks going back to the OS first. Thread-safe.
#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <unordered_map>

namespace tessel {

struct BlockPoolStats {
  size_t cached_bytes = 0;    // free blocks held for reuse
  size_t cached_blocks = 0;
  size_t live_bytes = 0;      // handed out and not yet returned
  size_t peak_live_bytes = 0;
  size_t cap_bytes = 0;       // current bound on cached_bytes
  int64_t reused = 0;         // requests served from the pool
  int64_t allocated = 0;      // requests that reached the allocator
  int64_t released = 0;       // free blocks handed back to the OS to respect the cap
};

class BlockPool {
 public:
  // Where blocks come from and go back to: the C heap unless told (strict mode's device arena).
  struct Backing {
    void* (*get)(size_t bytes);          // 64-byte aligned, nullptr when out of memory
    void (*put)(void* p, size_t bytes);  // bytes as given to get
  };
  static Backing heap();

  explicit BlockPool(size_t min_cap_bytes, Backing backing = heap());
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  static size_t block_size(size_t nbytes);  // the class a request of nbytes is served from
  void* get(size_t nbytes);                  // nullptr when the allocator fails
  void put(void* p, size_t nbytes);          // nbytes as given to get()
  BlockPoolStats stats() const;

 private:
  struct Block {
    void* ptr;
    size_t bytes;
  };
  using Lru = std::list<Block>;  // free blocks, least recently returned first
  void trim();                   // release the oldest free blocks while over the cap

  mutable std::mutex mu_;
  size_t min_cap_;
  Backing backing_;
  Lru lru_;
  std::unordered_map<size_t, std::list<Lru::iterator>> by_size_;  // newest last
  BlockPoolStats st_;
};

// Statistics of the process-wide pool that cpu tensor storage comes from (memory.cpp).
BlockPoolStats tensor_pool_stats();

}  // namespace tessel
