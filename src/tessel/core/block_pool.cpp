#include "tessel/core/block_pool.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>

#include "tessel/core/size_class.h"

namespace tessel {

namespace {
// The least rest of a free block worth keeping apart when a request takes its start: below it the
// rest stays with the block handed out (slack until it is freed and merges again).
constexpr size_t kMinSplitSmall = 64;
constexpr size_t kMinSplitLarge = 512;
}  // namespace

BlockPool::Backing BlockPool::heap() {
  return {[](size_t bytes) { return std::aligned_alloc(64, bytes); }, [](void* p, size_t) { std::free(p); }};
}

BlockPool::BlockPool(size_t min_cap_bytes, Backing backing) : min_cap_(min_cap_bytes), backing_(backing) {
  st_.cap_bytes = min_cap_bytes;
}

BlockPool::~BlockPool() {
  // Segments with a block still in use stay: a tensor may outlive the pool at process exit.
  std::lock_guard<std::mutex> lock(mu_);
  merge_parked();
  trim(0);
}

size_t BlockPool::block_size(size_t nbytes) {
  constexpr size_t kLine = 64, kExact = 4096;  // below 4 KiB: one class per cache line
  if (nbytes <= kExact) return nbytes ? (nbytes + kLine - 1) / kLine * kLine : kLine;
  return size_t(size_class_ceil(int64_t(nbytes), int64_t(kExact)));  // a multiple of 512 here
}

BlockPool::Block* BlockPool::take_fitting(FreeSet& free, size_t size) {
  // The smallest free block >= size, oldest first: a probe of that size before every segment.
  Segment before_all{nullptr, 0, 0, false, nullptr, false, {}};
  Block probe{nullptr, size, true, nullptr, nullptr, &before_all};
  const auto it = free.lower_bound(&probe);
  if (it == free.end()) return nullptr;
  Block* b = *it;
  free.erase(it);
  Segment* seg = b->segment;
  if (seg->idle) {
    idle_.erase(seg->in_idle);
    idle_bytes_ -= seg->bytes;
    seg->idle = false;
  }
  return b;
}

BlockPool::Block* BlockPool::new_segment(size_t size, bool small) {
  const size_t bytes = small ? kSmallSegment : size;
  char* base = static_cast<char*>(backing_.get(bytes));
  if (!base) return nullptr;
  auto* seg = new Segment{base, bytes, ++segments_taken_, small, nullptr, false, idle_.end()};
  seg->head = new Block{base, bytes, true, nullptr, nullptr, seg};
  segments_.insert(seg);
  st_.segment_bytes += bytes;
  st_.peak_segment_bytes = std::max(st_.peak_segment_bytes, st_.segment_bytes);
  ++st_.segments;
  return seg->head;
}

void BlockPool::hand_out(Block* b, size_t size) {
  b->free = false;
  FreeSet& free = b->segment->small ? free_small_ : free_large_;
  if (b->bytes - size >= (b->segment->small ? kMinSplitSmall : kMinSplitLarge)) {
    auto* rest = new Block{b->ptr + size, b->bytes - size, true, b, b->next, b->segment};
    if (b->next) b->next->prev = rest;
    b->next = rest;
    b->bytes = size;
    free.insert(rest);
  }
  live_.emplace(b->ptr, b);
}

void* BlockPool::get(size_t nbytes) {
  const size_t size = block_size(nbytes);
  const bool small = size <= kSmallRequest;
  std::lock_guard<std::mutex> lock(mu_);
  st_.live_bytes += size;
  st_.peak_live_bytes = std::max(st_.peak_live_bytes, st_.live_bytes);
  st_.cap_bytes = std::max(min_cap_, st_.peak_live_bytes);
  const auto parked = parked_.find(size);
  if (parked != parked_.end() && !parked->second.empty()) {
    Block* b = parked->second.back();
    parked->second.pop_back();
    --parked_blocks_;
    ++st_.reused;
    live_.emplace(b->ptr, b);
    return b->ptr;
  }
  // A small request takes the rest of a large free block before a segment of its own: free bytes
  // held in large segments would otherwise sit beside new small segments.
  const auto fitting = [&] {
    Block* b = take_fitting(small ? free_small_ : free_large_, size);
    return b || !small ? b : take_fitting(free_large_, size);
  };
  merge_parked();
  Block* b = fitting();
  if (b) {
    ++st_.reused;
  } else {
    b = new_segment(size, small);
    if (!b) {  // out of memory: give back every free segment and try once more
      trim(0);
      b = new_segment(size, small);
      if (!b) {
        st_.live_bytes -= size;
        return nullptr;
      }
    }
    ++st_.allocated;
  }
  hand_out(b, size);
  return b->ptr;
}

void BlockPool::make_free(Block* b) {
  FreeSet& free = b->segment->small ? free_small_ : free_large_;
  // Absorbs the block after `first` into it (out of the free set first: its key is its size).
  const auto absorb_next = [](Block* first) {
    Block* after = first->next;
    first->bytes += after->bytes;
    first->next = after->next;
    if (after->next) after->next->prev = first;
    delete after;
  };
  b->free = true;
  if (b->prev && b->prev->free) {  // b merges into the free block before it
    b = b->prev;
    free.erase(b);
    absorb_next(b);
  }
  if (b->next && b->next->free) {
    free.erase(b->next);
    absorb_next(b);
  }
  free.insert(b);
  if (!b->prev && !b->next) {  // the whole segment is free
    Segment* seg = b->segment;
    seg->idle = true;
    idle_.push_back(seg);
    seg->in_idle = std::prev(idle_.end());
    idle_bytes_ += seg->bytes;
  }
}

void BlockPool::merge_parked() {
  if (parked_blocks_ == 0) return;
  for (auto& [size, blocks] : parked_) {
    for (Block* b : blocks) make_free(b);
    blocks.clear();
  }
  parked_blocks_ = 0;
}

void BlockPool::put(void* p, size_t nbytes) {
  if (try_put(p, nbytes)) return;
  std::fprintf(stderr, "tessel: internal error: block %p returned to a pool that did not hand it out\n", p);
  std::abort();
}

bool BlockPool::try_put(void* p, size_t nbytes) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = live_.find(p);
  if (it == live_.end()) return false;
  Block* b = it->second;
  live_.erase(it);
  st_.live_bytes -= block_size(nbytes);
  parked_[b->bytes].push_back(b);
  ++parked_blocks_;
  const size_t cached = st_.segment_bytes - st_.live_bytes;
  if (cached > st_.cap_bytes) {
    merge_parked();
    trim(idle_bytes_ - std::min(idle_bytes_, cached - st_.cap_bytes));
  }
  return true;
}

void BlockPool::trim(size_t keep_free_bytes) {
  while (idle_bytes_ > keep_free_bytes && !idle_.empty()) {
    Segment* seg = idle_.front();
    idle_.pop_front();
    idle_bytes_ -= seg->bytes;
    (seg->small ? free_small_ : free_large_).erase(seg->head);
    delete seg->head;
    segments_.erase(seg);
    backing_.put(seg->base, seg->bytes);
    st_.segment_bytes -= seg->bytes;
    --st_.segments;
    ++st_.released;
    delete seg;
  }
}

void BlockPool::release_idle() {
  std::lock_guard<std::mutex> lock(mu_);
  merge_parked();
  trim(0);
}

BlockPoolStats BlockPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  BlockPoolStats st = st_;
  st.cached_bytes = st_.segment_bytes - st_.live_bytes;
  st.cached_blocks = free_small_.size() + free_large_.size() + parked_blocks_;
  return st;
}

}  // namespace tessel
