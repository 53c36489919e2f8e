// libtessel_heap_peak.so: an LD_PRELOAD interposer that counts the bytes the process holds from
// malloc (every path: operator new, std::vector, oneDNN scratchpads, MPI, the tensor pool's blocks)
// and their peak, independently of tessel's own allocator accounting. `tessel bench` finds the
// functions below with dlsym when the library is preloaded and compares the two
// (docs/perf.md, "Memory accounting"):
//   LD_PRELOAD=build/libtessel_heap_peak.so build/tessel bench configs/bench/llama-tiny.yaml
// Sizes are malloc_usable_size of each block (what the process really holds, rounding included).
// The real allocator is glibc's, reached through its __libc_* entry points, so no dlsym is needed
// while the interposer itself starts.
#include <malloc.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>

extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void __libc_free(void*);
}

namespace {

std::atomic<int64_t> g_live{0};
std::atomic<int64_t> g_peak{0};

void on_alloc(void* p) {
  if (!p) return;
  const int64_t n = int64_t(malloc_usable_size(p));
  const int64_t now = g_live.fetch_add(n, std::memory_order_relaxed) + n;
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

void on_free(void* p) {
  if (p) g_live.fetch_sub(int64_t(malloc_usable_size(p)), std::memory_order_relaxed);
}

}  // namespace

extern "C" {

// The interface tessel bench looks up.
int64_t tessel_heap_live_bytes() { return g_live.load(std::memory_order_relaxed); }
int64_t tessel_heap_peak_bytes() { return g_peak.load(std::memory_order_relaxed); }
void tessel_heap_reset_peak() { g_peak.store(g_live.load(std::memory_order_relaxed), std::memory_order_relaxed); }

void* malloc(size_t n) {
  void* p = __libc_malloc(n);
  on_alloc(p);
  return p;
}

void* calloc(size_t n, size_t size) {
  void* p = __libc_calloc(n, size);
  on_alloc(p);
  return p;
}

void* realloc(void* old, size_t n) {
  const int64_t before = old ? int64_t(malloc_usable_size(old)) : 0;
  void* p = __libc_realloc(old, n);
  if (p || n == 0) g_live.fetch_sub(before, std::memory_order_relaxed);  // the old block is gone
  on_alloc(p);
  return p;
}

void free(void* p) {
  on_free(p);
  __libc_free(p);
}

void* memalign(size_t alignment, size_t n) {
  void* p = __libc_memalign(alignment, n);
  on_alloc(p);
  return p;
}

void* aligned_alloc(size_t alignment, size_t n) { return memalign(alignment, n); }

int posix_memalign(void** out, size_t alignment, size_t n) {
  if (alignment % sizeof(void*) != 0 || (alignment & (alignment - 1)) != 0) return EINVAL;
  void* p = memalign(alignment, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

void* valloc(size_t n) { return memalign(4096, n); }

}  // extern "C"
