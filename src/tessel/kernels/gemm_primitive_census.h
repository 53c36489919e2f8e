#pragma once
// The heap that the cpu GEMM's cached oneDNN primitives hold. gemm() (kernels/cpu/gemm_onednn.cpp)
// keeps one primitive per problem signature for the rest of the process: its JIT-compiled kernels
// and descriptors, about 50-70 KB each on AVX-512, allocated by oneDNN and not by tessel's
// allocator, so no memory category counts them. A dry run creates none, so the planner takes a
// census instead: while one is open, every distinct primitive that a gemm() call would use (on cpu)
// or would create (a meta call, whose workspace asks gemm_cpu_workspace() for the same problems)
// is counted once, with the heap it holds. That is measured (mallinfo2 before and after) when this
// process first creates a primitive of that signature: gemm() records it for those it runs, and a
// census creates one for those it has not seen (oneDNN's own primitive cache then keeps it, as it
// keeps those gemm() makes: ONEDNN_PRIMITIVE_CACHE_CAPACITY of them, 1024 by default).
#include <cstdint>

namespace tessel::kernels {

class GemmPrimitiveCensus {
 public:
  GemmPrimitiveCensus();  // one open at a time in a process (checked)
  ~GemmPrimitiveCensus();
  GemmPrimitiveCensus(const GemmPrimitiveCensus&) = delete;
  GemmPrimitiveCensus& operator=(const GemmPrimitiveCensus&) = delete;

  // Distinct primitives the GEMM calls since it opened use, and the heap bytes they hold.
  int64_t primitives() const;
  int64_t heap_bytes() const;
};

}  // namespace tessel::kernels
