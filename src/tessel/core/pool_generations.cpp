#include "tessel/core/pool_generations.h"

#include <cstdio>
#include <cstdlib>

namespace tessel {

PoolGenerations::PoolGenerations(size_t min_cap_bytes, BlockPool::Backing backing)
    : min_cap_(min_cap_bytes), backing_(backing), current_(fresh()) {}

void* PoolGenerations::get(size_t nbytes) {
  std::lock_guard<std::mutex> lock(mu_);
  return current_->get(nbytes);
}

void PoolGenerations::put(void* p, size_t nbytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (current_->try_put(p, nbytes)) return;
  for (auto it = retired_.begin(); it != retired_.end(); ++it) {
    if (!(*it)->try_put(p, nbytes)) continue;
    (*it)->release_idle();
    if ((*it)->stats().live_bytes == 0) retired_.erase(it);  // its last block: the pool goes
    return;
  }
  std::fprintf(stderr, "tessel: internal error: block %p returned to a pool that did not hand it out\n", p);
  std::abort();
}

void PoolGenerations::start_fresh() {
  std::lock_guard<std::mutex> lock(mu_);
  current_->release_idle();
  if (current_->stats().live_bytes > 0) retired_.push_back(std::move(current_));
  current_ = fresh();
}

void PoolGenerations::release_idle() {
  std::lock_guard<std::mutex> lock(mu_);
  current_->release_idle();
  for (auto& r : retired_) r->release_idle();
}

BlockPoolStats PoolGenerations::current_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_->stats();
}

BlockPoolStats PoolGenerations::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  BlockPoolStats all = current_->stats();
  for (const auto& r : retired_) {
    const BlockPoolStats s = r->stats();
    all.cached_bytes += s.cached_bytes;
    all.cached_blocks += s.cached_blocks;
    all.live_bytes += s.live_bytes;
    all.segment_bytes += s.segment_bytes;
    all.segments += s.segments;
    all.reused += s.reused;
    all.allocated += s.allocated;
    all.released += s.released;
  }
  return all;
}

size_t PoolGenerations::segment_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = current_->stats().segment_bytes;
  for (const auto& r : retired_) n += r->stats().segment_bytes;
  return n;
}

size_t PoolGenerations::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = current_->stats().cached_bytes;
  for (const auto& r : retired_) n += r->stats().cached_bytes;
  return n;
}

}  // namespace tessel
