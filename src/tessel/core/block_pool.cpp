#include "tessel/core/block_pool.h"

#include <algorithm>
#include <cstdlib>

#include "tessel/core/size_class.h"

namespace tessel {

BlockPool::Backing BlockPool::heap() {
  return {[](size_t bytes) { return std::aligned_alloc(64, bytes); }, [](void* p, size_t) { std::free(p); }};
}

BlockPool::BlockPool(size_t min_cap_bytes, Backing backing) : min_cap_(min_cap_bytes), backing_(backing) {
  st_.cap_bytes = min_cap_bytes;
}

BlockPool::~BlockPool() {
  for (const Block& b : lru_) backing_.put(b.ptr, b.bytes);
}

size_t BlockPool::block_size(size_t nbytes) {
  constexpr size_t kLine = 64, kExact = 4096;  // below 4 KiB: one class per cache line
  if (nbytes <= kExact) return nbytes ? (nbytes + kLine - 1) / kLine * kLine : kLine;
  return size_t(size_class_ceil(int64_t(nbytes), int64_t(kExact)));  // a multiple of 512 here
}

void* BlockPool::get(size_t nbytes) {
  const size_t size = block_size(nbytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    st_.live_bytes += size;
    st_.peak_live_bytes = std::max(st_.peak_live_bytes, st_.live_bytes);
    st_.cap_bytes = std::max(min_cap_, st_.peak_live_bytes);
    auto it = by_size_.find(size);
    if (it != by_size_.end() && !it->second.empty()) {
      const Lru::iterator block = it->second.back();  // the most recently returned: likely still cached
      it->second.pop_back();
      void* p = block->ptr;
      lru_.erase(block);
      st_.cached_bytes -= size;
      --st_.cached_blocks;
      ++st_.reused;
      return p;
    }
    ++st_.allocated;
  }
  void* p = backing_.get(size);
  if (!p) {
    std::lock_guard<std::mutex> lock(mu_);
    st_.live_bytes -= size;
  }
  return p;
}

void BlockPool::put(void* p, size_t nbytes) {
  const size_t size = block_size(nbytes);
  std::lock_guard<std::mutex> lock(mu_);
  st_.live_bytes -= size;
  lru_.push_back({p, size});
  by_size_[size].push_back(std::prev(lru_.end()));
  st_.cached_bytes += size;
  ++st_.cached_blocks;
  trim();
}

void BlockPool::trim() {
  while (st_.cached_bytes > st_.cap_bytes && !lru_.empty()) {
    const Block oldest = lru_.front();
    auto& same = by_size_[oldest.bytes];
    same.pop_front();  // the oldest block of a size is the first of its list
    lru_.pop_front();
    backing_.put(oldest.ptr, oldest.bytes);
    st_.cached_bytes -= oldest.bytes;
    --st_.cached_blocks;
    ++st_.released;
  }
}

BlockPoolStats BlockPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return st_;
}

}  // namespace tessel
