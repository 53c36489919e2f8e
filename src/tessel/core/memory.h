#pragma once
// Device allocators with memory accounted by category.
//
// Every tensor allocation goes through the allocator of its device, tagged with the category of
// what it holds. The allocator keeps, per category, the bytes in use now and their peak, and the
// peak of the total with each category's share at that moment (which is what a dry run reports as
// "where the peak occurs"). Bytes are accounted as the block the request is served from
// (BlockPool::block_size: 64-byte multiples below 4 KiB, 8 size classes per octave above), on every
// device, so a meta run accounts exactly what the CPU run does.
//
// The category of an allocation is the innermost MemoryCategoryScope of the allocating thread, or
// `activations` when there is none: memory a step creates and frees (what forward keeps for
// backward, and its temporaries) is the default; model state, communication buffers and kernel
// workspaces are tagged where they are created.
#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "tessel/core/device.h"

namespace tessel {

enum class MemoryCategory : uint8_t {
  parameters,       // weights: fp32 masters and their compute (bf16) copy
  gradients,        // fp32 main gradients
  optimizer_state,  // Adam moments (FP8 scaling state lives in host vectors, not accounted yet)
  activations,      // created and freed within a step (the default)
  communication,    // staging buffers of collectives (pipeline transfers count as activations)
  workspace,        // kernel scratch
};
inline constexpr int kMemoryCategories = 6;

std::string_view memory_category_name(MemoryCategory c);

// Where in a step the allocating thread is, for "where the peak occurs": what it is doing (a static
// string: "forward", "backward", "optimizer step", ...), and when known the micro-batch, model chunk
// and layer (-1: not known). Set by the trainer, the pipeline executor and the model with scopes.
struct MemoryPhase {
  const char* what = "setup";
  int micro_batch = -1;
  int chunk = -1;
  int layer = -1;
};
std::string describe(const MemoryPhase& p);  // "backward, micro-batch 3, chunk 0, layer 5"

struct MemoryStats {
  using PerCategory = std::array<int64_t, kMemoryCategories>;  // bytes, indexed by MemoryCategory
  PerCategory current{};
  PerCategory peak{};     // the largest `current` of each category on its own
  PerCategory at_peak{};  // each category's bytes when the total was at its peak (sums to peak_total)
  // The bytes asked for, before rounding to blocks: what the same tensors need on a device whose
  // allocator rounds otherwise (a CUDA caching allocator rounds to 512 B and 2 MiB segments).
  PerCategory requested{};
  PerCategory requested_at_peak{};  // `requested` when the total (of blocks) was at its peak
  int64_t current_total = 0;
  int64_t peak_total = 0;
  // What the device allocator holds: the bytes in use plus the free blocks it keeps for reuse (the
  // pool; meta runs the same pool over made-up addresses), and its peak. peak_reserved - peak_total
  // is the pool's slack.
  int64_t reserved = 0;
  int64_t peak_reserved = 0;
  // Each category's bytes in use when the reserve was at its peak: of those moments, the one with
  // the most in use (the reserve stays at its peak for a run's every later step).
  PerCategory at_peak_reserved{};
  MemoryPhase peak_reserved_phase;  // the allocating thread's phase at that moment
  int64_t allocations = 0;  // requests since the allocator was created
  MemoryPhase peak_phase;   // the allocating thread's phase when the total reached peak_total

  int64_t of(MemoryCategory c) const { return current[size_t(c)]; }
  int64_t peak_of(MemoryCategory c) const { return peak[size_t(c)]; }
};

// Bytes by category as the allocator accounts them (blocks) and as requested: what a stretch of
// allocations and frees changed (MemoryStats::current and ::requested after, minus before).
struct MemoryAmount {
  MemoryStats::PerCategory blocks{};
  MemoryStats::PerCategory requested{};
  static MemoryAmount between(const MemoryStats& before, const MemoryStats& after);
  MemoryAmount operator+(const MemoryAmount& o) const;
  MemoryAmount operator-(const MemoryAmount& o) const { return *this + o.times(-1); }
  MemoryAmount times(int64_t n) const;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual Device device() const = 0;

  // Bytes accounted for a request of nbytes (its block size), the same on every device.
  static int64_t accounted_bytes(size_t nbytes);

  // A block of nbytes tagged `c`; throws tessel::Error when the device is out of memory. On meta
  // the block is a made-up address that names it to the allocator and holds nothing (null under a
  // MetaPoolOffScope): a meta Storage keeps it and has no data (Storage::ptr null).
  void* allocate(size_t nbytes, MemoryCategory c);
  // Returns a block from allocate(nbytes, c), with the same nbytes and category.
  void deallocate(void* block, size_t nbytes, MemoryCategory c) noexcept;
  // Starts the device's pool afresh, as in a new process: blocks in use go back to the pool they
  // came from, later requests to a new one (core/pool_generations.h). A measurement of the reserve
  // starts with it, so that it does not depend on what ran before it in the process. (Not strict
  // cpu mode's pool over the device arena, whose blocks go back in queue order: its reserve depends
  // on timing and is not a measurement.)
  virtual void start_fresh_pool() {}

  MemoryStats stats() const;
  // Meta only: accounts `a` as allocations (positive entries) and frees (negative) of its categories
  // that were not made (MetaBytesHeld), updating the peaks as allocate() does.
  void account_meta(const MemoryAmount& a);
  // Starts a new peak measurement: every peak becomes the bytes in use now (e.g. at the start of a
  // step, so the peak is the step's).
  void reset_peak();

 protected:
  virtual void* raw_allocate(size_t nbytes) = 0;  // throws when out of memory
  virtual void raw_deallocate(void* p, size_t nbytes) noexcept = 0;
  virtual int64_t cached_bytes() const { return 0; }  // free blocks kept for reuse

 private:
  mutable std::mutex mu_;
  MemoryStats st_;
  int64_t in_use_at_peak_reserved_ = 0;  // the sum of st_.at_peak_reserved
};

// The process-wide allocator of a device.
Allocator& allocator(Device d);

// While one is alive (in any thread), meta allocations skip the pool: their bytes, categories and
// peaks are accounted as ever (Allocator::accounted_bytes), but their block is null and they leave
// no free blocks, so the reserve grows only by what is in use (it is no prediction of the cpu
// pool's). For a meta run that does not read the reserve: a plan on a profile other than this
// cpu's prices the bytes requested, and the pool's bookkeeping was 15-20% of a DeepSeek-V3
// estimate's samples, beside the mallocs of its trees' nodes. Blocks taken from the pool before go
// back to it when freed.
class MetaPoolOffScope {
 public:
  MetaPoolOffScope();
  ~MetaPoolOffScope();
  MetaPoolOffScope(const MetaPoolOffScope&) = delete;
  MetaPoolOffScope& operator=(const MetaPoolOffScope&) = delete;
};

// Bytes held on the meta allocator on behalf of allocations that were never made: a meta run that
// runs one of several alike calls (nn/alike_calls.h) holds here what the calls it did not run would
// have left allocated, and gives it back when it is destroyed (as those allocations would have been
// freed with their owner). Entries may be negative: the owner also holds what calls not run would
// have freed. Move-only.
class MetaBytesHeld {
 public:
  MetaBytesHeld() = default;
  ~MetaBytesHeld() { release(); }
  MetaBytesHeld(MetaBytesHeld&& o) noexcept : held_(o.held_) { o.held_ = {}; }
  MetaBytesHeld& operator=(MetaBytesHeld&& o) noexcept;
  MetaBytesHeld(const MetaBytesHeld&) = delete;
  MetaBytesHeld& operator=(const MetaBytesHeld&) = delete;
  // Accounts `a` on the meta allocator now (raising its peak where the total rises past it).
  void add(const MemoryAmount& a);
  void release() noexcept;  // gives everything held back

 private:
  MemoryAmount held_;
};

// The category of allocations made by this thread while the scope lives (scopes nest).
class MemoryCategoryScope {
 public:
  explicit MemoryCategoryScope(MemoryCategory c);
  ~MemoryCategoryScope();
  MemoryCategoryScope(const MemoryCategoryScope&) = delete;
  MemoryCategoryScope& operator=(const MemoryCategoryScope&) = delete;

 private:
  MemoryCategory previous_;
};

MemoryCategory current_memory_category();

// The allocating thread's phase while the scope lives (scopes nest). The first form changes only
// `what`, keeping the enclosing micro-batch and chunk; the second sets them (and clears the layer).
class MemoryPhaseScope {
 public:
  explicit MemoryPhaseScope(const char* what);
  MemoryPhaseScope(const char* what, int micro_batch, int chunk);
  ~MemoryPhaseScope();
  MemoryPhaseScope(const MemoryPhaseScope&) = delete;
  MemoryPhaseScope& operator=(const MemoryPhaseScope&) = delete;

 private:
  MemoryPhase previous_;
};
// Sets only the layer (the model's loops over its layers).
class MemoryLayerScope {
 public:
  explicit MemoryLayerScope(int layer);
  ~MemoryLayerScope();
  MemoryLayerScope(const MemoryLayerScope&) = delete;
  MemoryLayerScope& operator=(const MemoryLayerScope&) = delete;

 private:
  int previous_;
};
const MemoryPhase& current_memory_phase();

}  // namespace tessel
