#pragma once
// The process's heap as glibc counts it (mallinfo2: every arena, chunk headers included), for tests
// that check what the code measures the same way (kernels/gemm_primitive_census.h). Under a
// sanitizer the allocator is the sanitizer's and glibc counts nothing: such tests ask first.
#include <malloc.h>

#include <cstdint>
#include <cstdlib>

namespace tessel::testing {

inline int64_t glibc_heap_in_use() {
  const struct mallinfo2 m = mallinfo2();
  return int64_t(m.uordblks + m.hblkhd);
}

// Whether glibc's count sees a 4 MiB malloc: false under ASan, TSan and other allocators.
inline bool glibc_counts_the_heap() {
  const int64_t before = glibc_heap_in_use();
  void* volatile block = std::malloc(4 << 20);
  const bool seen = glibc_heap_in_use() - before >= (4 << 20);
  std::free(block);
  return seen;
}

}  // namespace tessel::testing
