#include "tessel/core/memory.h"

#include <algorithm>
#include <atomic>

#include "tessel/core/block_pool.h"
#include "tessel/core/check.h"
#include "tessel/core/device_arena.h"
#include "tessel/core/device_queue.h"
#include "tessel/core/pool_generations.h"

namespace tessel {

std::string_view memory_category_name(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::parameters: return "parameters";
    case MemoryCategory::gradients: return "gradients";
    case MemoryCategory::optimizer_state: return "optimizer_state";
    case MemoryCategory::activations: return "activations";
    case MemoryCategory::communication: return "communication";
    case MemoryCategory::workspace: return "workspace";
  }
  return "?";
}

int64_t Allocator::accounted_bytes(size_t nbytes) { return int64_t(BlockPool::block_size(nbytes)); }

void* Allocator::allocate(size_t nbytes, MemoryCategory c) {
  const int64_t b = accounted_bytes(nbytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    st_.current[size_t(c)] += b;
    st_.requested[size_t(c)] += int64_t(nbytes);
    st_.peak[size_t(c)] = std::max(st_.peak[size_t(c)], st_.current[size_t(c)]);
    st_.current_total += b;
    if (st_.current_total > st_.peak_total) {
      st_.peak_total = st_.current_total;
      st_.at_peak = st_.current;
      st_.requested_at_peak = st_.requested;
      st_.peak_phase = current_memory_phase();
    }
    ++st_.allocations;
  }
  void* p = nullptr;
  try {
    p = raw_allocate(nbytes);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    st_.current[size_t(c)] -= b;
    st_.requested[size_t(c)] -= int64_t(nbytes);
    st_.current_total -= b;
    throw;
  }
  // The reserve only grows when a block comes from the system, i.e. right after an allocation.
  const int64_t cached = cached_bytes();
  std::lock_guard<std::mutex> lock(mu_);
  // Of the moments the reserve is at its peak, the one with the most in use (the least free).
  const int64_t reserved = st_.current_total + cached;
  if (reserved > st_.peak_reserved || (reserved == st_.peak_reserved && st_.current_total > in_use_at_peak_reserved_)) {
    st_.peak_reserved = reserved;
    st_.at_peak_reserved = st_.current;
    st_.peak_reserved_phase = current_memory_phase();
    in_use_at_peak_reserved_ = st_.current_total;
  }
  return p;
}

void Allocator::deallocate(void* p, size_t nbytes, MemoryCategory c) noexcept {
  raw_deallocate(p, nbytes);
  const int64_t b = accounted_bytes(nbytes);
  std::lock_guard<std::mutex> lock(mu_);
  st_.current[size_t(c)] -= b;
  st_.requested[size_t(c)] -= int64_t(nbytes);
  st_.current_total -= b;
}

void Allocator::account_meta(const MemoryAmount& a) {
  TESSEL_CHECK(device() == Device::meta, "bytes standing for allocations not made are accounted on meta only");
  std::lock_guard<std::mutex> lock(mu_);
  for (int c = 0; c < kMemoryCategories; ++c) {
    st_.current[size_t(c)] += a.blocks[size_t(c)];
    st_.requested[size_t(c)] += a.requested[size_t(c)];
    st_.peak[size_t(c)] = std::max(st_.peak[size_t(c)], st_.current[size_t(c)]);
    st_.current_total += a.blocks[size_t(c)];
  }
  if (st_.current_total > st_.peak_total) {
    st_.peak_total = st_.current_total;
    st_.at_peak = st_.current;
    st_.requested_at_peak = st_.requested;
    st_.peak_phase = current_memory_phase();
  }
}

MemoryAmount MemoryAmount::between(const MemoryStats& before, const MemoryStats& after) {
  MemoryAmount d;
  for (size_t c = 0; c < size_t(kMemoryCategories); ++c) {
    d.blocks[c] = after.current[c] - before.current[c];
    d.requested[c] = after.requested[c] - before.requested[c];
  }
  return d;
}

MemoryAmount MemoryAmount::operator+(const MemoryAmount& o) const {
  MemoryAmount d = *this;
  for (size_t c = 0; c < size_t(kMemoryCategories); ++c) {
    d.blocks[c] += o.blocks[c];
    d.requested[c] += o.requested[c];
  }
  return d;
}

MemoryAmount MemoryAmount::times(int64_t n) const {
  MemoryAmount d = *this;
  for (size_t c = 0; c < size_t(kMemoryCategories); ++c) {
    d.blocks[c] *= n;
    d.requested[c] *= n;
  }
  return d;
}

MetaBytesHeld& MetaBytesHeld::operator=(MetaBytesHeld&& o) noexcept {
  if (this != &o) {
    release();
    held_ = o.held_;
    o.held_ = {};
  }
  return *this;
}

void MetaBytesHeld::add(const MemoryAmount& a) {
  allocator(Device::meta).account_meta(a);
  held_ = held_ + a;
}

void MetaBytesHeld::release() noexcept {
  bool any = false;
  for (size_t c = 0; c < size_t(kMemoryCategories); ++c) any = any || held_.blocks[c] != 0 || held_.requested[c] != 0;
  if (!any) return;
  allocator(Device::meta).account_meta(held_.times(-1));
  held_ = {};
}

MemoryStats Allocator::stats() const {
  const int64_t cached = cached_bytes();
  std::lock_guard<std::mutex> lock(mu_);
  MemoryStats s = st_;
  s.reserved = s.current_total + cached;
  return s;
}

void Allocator::reset_peak() {
  const int64_t cached = cached_bytes();
  std::lock_guard<std::mutex> lock(mu_);
  st_.peak = st_.current;
  st_.at_peak = st_.current;
  st_.requested_at_peak = st_.requested;
  st_.peak_total = st_.current_total;
  st_.peak_reserved = st_.current_total + cached;
  st_.at_peak_reserved = st_.current;
  in_use_at_peak_reserved_ = st_.current_total;
  st_.peak_phase = current_memory_phase();
  st_.peak_reserved_phase = st_.peak_phase;
}

namespace {

// Host memory from the process-wide tensor pool (block_pool.h), which keeps at least 64 MiB of
// freed blocks and otherwise as much as the process ever had in use at once. In strict mode
// (core/device.h) from a second pool over the protected device arena (device_arena.h), whose
// blocks go back in queue order (device_queue.h): a kernel launched before the free may still use them.
class CpuAllocator final : public Allocator {
 public:
  Device device() const override { return Device::cpu; }
  PoolGenerations& pool() { return pool_; }
  void start_fresh_pool() override { pool_.start_fresh(); }

 protected:
  void* raw_allocate(size_t nbytes) override {
    void* p = strict_cpu() ? strict_pool().get(nbytes) : pool_.get(nbytes);
    TESSEL_CHECK(p != nullptr, "out of memory allocating {} bytes on the cpu device", nbytes);
    return p;
  }
  void raw_deallocate(void* p, size_t nbytes) noexcept override {
    if (!strict_pool_ || !DeviceArena::instance().contains(p)) {
      pool_.put(p, nbytes);
      return;
    }
    BlockPool* pool = strict_pool_;
    release_in_queue_order([pool, p, nbytes] { pool->put(p, nbytes); });
  }
  int64_t cached_bytes() const override {
    const BlockPool* strict = strict_pool_;
    return int64_t(pool_.cached_bytes()) + (strict ? int64_t(strict->stats().cached_bytes) : 0);
  }

 private:
  BlockPool& strict_pool() {
    std::call_once(strict_once_, [this] {
      const BlockPool::Backing arena{[](size_t bytes) { return DeviceArena::instance().allocate(bytes); },
                                     [](void* p, size_t bytes) { DeviceArena::instance().release(p, bytes); }};
      strict_pool_ = new BlockPool(size_t(64) << 20, arena);  // never destroyed, as the allocator
    });
    return *strict_pool_;
  }

  PoolGenerations pool_{size_t(64) << 20, BlockPool::heap()};
  std::once_flag strict_once_;
  std::atomic<BlockPool*> strict_pool_{nullptr};
};

// Made-up addresses for the meta pool's segments: 64-byte aligned, never reused, never dereferenced
// (a meta tensor has no data: Storage::ptr is null, the address is only the pool's name for a block).
void* meta_segment(size_t bytes) {
  static std::atomic<uintptr_t> next{uintptr_t(1) << 44};
  return reinterpret_cast<void*>(next.fetch_add((bytes + 63) / 64 * 64));
}

// How many MetaPoolOffScope are alive.
std::atomic<int> meta_pool_off{0};

// Allocates nothing: the same pool as the cpu's runs over made-up addresses, so the requests of a
// meta run leave the same free blocks, and reach the same reserve, as on the cpu.
class MetaAllocator final : public Allocator {
 public:
  Device device() const override { return Device::meta; }
  void start_fresh_pool() override { pool_.start_fresh(); }

 protected:
  // Without the pool a block is null: nothing to name, and nothing to give back.
  void* raw_allocate(size_t nbytes) override { return meta_pool_off.load() > 0 ? nullptr : pool_.get(nbytes); }
  void raw_deallocate(void* p, size_t nbytes) noexcept override {
    if (p) pool_.put(p, nbytes);
  }
  int64_t cached_bytes() const override { return int64_t(pool_.cached_bytes()); }

 private:
  PoolGenerations pool_{size_t(64) << 20, BlockPool::Backing{meta_segment, [](void*, size_t) {}}};
};

// Never destroyed: tensors may outlive static destructors.
CpuAllocator& cpu_allocator() {
  static CpuAllocator* a = new CpuAllocator;
  return *a;
}

thread_local MemoryCategory t_category = MemoryCategory::activations;
thread_local MemoryPhase t_phase;

}  // namespace

Allocator& allocator(Device d) {
  static MetaAllocator* meta = new MetaAllocator;
  return d == Device::meta ? static_cast<Allocator&>(*meta) : cpu_allocator();
}

MetaPoolOffScope::MetaPoolOffScope() { meta_pool_off.fetch_add(1); }
MetaPoolOffScope::~MetaPoolOffScope() { meta_pool_off.fetch_sub(1); }

BlockPoolStats tensor_pool_stats() { return cpu_allocator().pool().stats(); }

MemoryCategoryScope::MemoryCategoryScope(MemoryCategory c) : previous_(t_category) { t_category = c; }
MemoryCategoryScope::~MemoryCategoryScope() { t_category = previous_; }
MemoryCategory current_memory_category() { return t_category; }

std::string describe(const MemoryPhase& p) {
  std::string s = p.what;
  if (p.micro_batch >= 0) s += ", micro-batch " + std::to_string(p.micro_batch);
  if (p.chunk >= 0) s += ", chunk " + std::to_string(p.chunk);
  if (p.layer >= 0) s += ", layer " + std::to_string(p.layer);
  return s;
}

MemoryPhaseScope::MemoryPhaseScope(const char* what) : previous_(t_phase) { t_phase.what = what; }
MemoryPhaseScope::MemoryPhaseScope(const char* what, int micro_batch, int chunk) : previous_(t_phase) {
  t_phase = {what, micro_batch, chunk, -1};
}
MemoryPhaseScope::~MemoryPhaseScope() { t_phase = previous_; }
MemoryLayerScope::MemoryLayerScope(int layer) : previous_(t_phase.layer) { t_phase.layer = layer; }
MemoryLayerScope::~MemoryLayerScope() { t_phase.layer = previous_; }
const MemoryPhase& current_memory_phase() { return t_phase; }

}  // namespace tessel
