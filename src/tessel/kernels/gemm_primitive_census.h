#pragma once
// The heap that the cpu GEMM's cached oneDNN primitives hold. gemm() (kernels/cpu/gemm_onednn.cpp)
// keeps one primitive per problem signature for the rest of the process: its JIT-compiled kernels
// and descriptors, tens of KB each (about 35 KB for small problems on AVX-512, 10 KB on AVX2),
// allocated by oneDNN and not by tessel's allocator, so no memory category counts them. A dry run
// creates no primitive, so the planner takes a census instead: while one is open, every distinct
// primitive that a gemm() call would use (on cpu) or would create (a meta call, whose workspace asks
// gemm_cpu_workspace() for the same problems) is counted once, with the heap it holds. That is
// measured (glibc's mallinfo2 before and after) when this process first creates a primitive of that
// signature: gemm() records it for those it runs, and a census creates one for those it has not
// seen and frees them as it closes (it empties oneDNN's own primitive cache, which would keep them).
// The sizes are this machine's (its instruction set), and a measurement also counts what another
// thread allocates meanwhile: a planner's meta runs have no such thread.
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
