#pragma once
// A caching pool for tensor storage (the scheme of a GPU caching allocator). A training step
// allocates the same buffers in the same order every time, so after the first step nothing reaches
// the OS: without the pool, glibc returns large blocks with munmap and every step pays page faults
// and zeroing for its activations (the logits alone are 131 MB at vocab 32000).
//
// Requests are rounded up to size classes (64-byte multiples below 4 KiB, 8 classes per octave
// above: what the allocators account, so the meta device counts the same bytes). Blocks are carved
// from segments taken from the backing: requests up to 1 MiB from shared 2 MiB segments, larger ones
// from a segment of their own size. A freed block is first parked as it is, and a request of its
// exact size takes the most recently parked one (still in cache: a step's sizes repeat). On a
// request no parked block matches, every parked block first merges with its free neighbours in its
// segment; the request then takes the smallest free block that holds it (best fit), the rest of
// that block staying free, and only when none holds it is a new segment taken. Among free blocks
// of one size the one in the oldest segment, then the lowest offset, is taken: never the lowest
// address, so that the pool's choices depend on its requests alone, not on where the backing
// put the segments, and the meta device's pool over made-up addresses (memory.cpp) makes the same
// choices as the cpu's over the heap. (Merging only when
// no free block holds the request keeps more blocks of exact sizes, but replayed on llama-tiny
// with FP8 it held 60 MB beyond the peak in use instead of 27: the fragments it leaves unmerged
// are too small for the step's large requests.) So a buffer
// whose size changes from step to step (the rows each MoE expert gets) fits where a larger one was,
// and the memory held stays close to the most ever in use at once: the segments are what the
// process really holds, the slack is what they hold beyond the blocks in use.
//
// Free segments (no block in use) are kept up to a cap, at most the larger of `min_cap_bytes` and
// the most bytes ever handed out at once; beyond it the least recently freed go back to the
// backing. Thread-safe.
#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace tessel {

struct BlockPoolStats {
  size_t cached_bytes = 0;    // held by the pool and not handed out: segment_bytes - live_bytes
  size_t cached_blocks = 0;   // free blocks
  size_t live_bytes = 0;      // handed out and not yet returned
  size_t peak_live_bytes = 0;
  size_t segment_bytes = 0;   // taken from the backing and not given back
  size_t peak_segment_bytes = 0;
  size_t segments = 0;
  size_t cap_bytes = 0;       // bound on the bytes of free segments kept
  int64_t reused = 0;         // requests served from a free block
  int64_t allocated = 0;      // requests that took a new segment from the backing
  int64_t released = 0;       // free segments given back to respect the cap
};

class BlockPool {
 public:
  // Where segments come from and go back to: the C heap unless told (strict mode's device arena).
  struct Backing {
    void* (*get)(size_t bytes);          // 64-byte aligned, nullptr when out of memory
    void (*put)(void* p, size_t bytes);  // bytes as given to get
  };
  static Backing heap();

  static constexpr size_t kSmallRequest = size_t(1) << 20;  // up to this: from shared segments
  static constexpr size_t kSmallSegment = size_t(2) << 20;

  explicit BlockPool(size_t min_cap_bytes, Backing backing = heap());
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  static size_t block_size(size_t nbytes);  // the class a request of nbytes is served from
  void* get(size_t nbytes);                  // nullptr when the backing fails
  void put(void* p, size_t nbytes);          // nbytes as given to get()
  bool try_put(void* p, size_t nbytes);      // put(), or false when p is not a block of this pool
  BlockPoolStats stats() const;
  // Gives every segment without a block in use back to the backing (the pool otherwise keeps them).
  void release_idle();

 private:
  struct Segment;
  struct Block {  // a run of a segment: in use, parked or free; neighbours in address order
    char* ptr;
    size_t bytes;
    bool free;  // in a free set (a parked block is not: it is not merged)
    Block* prev;
    Block* next;
    Segment* segment;
  };
  struct Segment {
    char* base;
    size_t bytes;
    uint64_t order;  // 1 for the pool's first segment, 2 for its second, ... (take_fitting's probe uses 0)
    bool small;
    Block* head;                          // the block at base: never merged away
    bool idle = false;                    // one free block spans it
    std::list<Segment*>::iterator in_idle;
  };
  struct BySizeThenAge {  // size, then the segment's order, then the offset in it
    bool operator()(const Block* a, const Block* b) const {
      if (a->bytes != b->bytes) return a->bytes < b->bytes;
      if (a->segment != b->segment) return a->segment->order < b->segment->order;
      return a->ptr < b->ptr;
    }
  };
  using FreeSet = std::set<Block*, BySizeThenAge>;

  Block* take_fitting(FreeSet& free, size_t size);  // nullptr when no free block holds size
  Block* new_segment(size_t size, bool small);      // nullptr when the backing fails
  void hand_out(Block* b, size_t size);  // the rest of b, if worth it, stays free
  void make_free(Block* b);  // merges b with its free neighbours into a free set
  void merge_parked();
  void trim(size_t keep_free_bytes);  // give back idle segments, oldest first, beyond keep_free_bytes

  mutable std::mutex mu_;
  size_t min_cap_;
  Backing backing_;
  FreeSet free_small_, free_large_;
  std::unordered_map<void*, Block*> live_;
  std::unordered_map<size_t, std::vector<Block*>> parked_;  // by size, most recently freed last
  size_t parked_blocks_ = 0;
  std::list<Segment*> idle_;  // least recently freed first
  std::unordered_set<Segment*> segments_;
  size_t idle_bytes_ = 0;
  uint64_t segments_taken_ = 0;
  BlockPoolStats st_;
};

// Statistics of the pools cpu tensor storage comes from (memory.cpp): the current one and those a
// fresh start retired that still have blocks in use (core/pool_generations.h), added up; the peaks
// and the cap are the current pool's.
BlockPoolStats tensor_pool_stats();

}  // namespace tessel
