// A bf16 GEMM where oneDNN has no bf16 matmul (below AVX512_CORE: a CPU without AVX-512, or
// ONEDNN_MAX_CPU_ISA=AVX2 as ctest's isa_avx2.attention runs this) is a named error, not oneDNN's
// "could not create a primitive descriptor"; on every other instruction set it computes.
#include <gtest/gtest.h>

#include <string>

#include "tessel/core/check.h"
#include "tessel/core/tensor.h"
#include "tessel/kernels/gemm.h"

namespace tessel {
namespace {

TEST(GemmIsa, Bf16WithoutBf16MatmulIsNamed) {
  Tensor a = Tensor::zeros({3, 5}, DType::bf16), b = Tensor::zeros({5, 4}, DType::bf16),
         c = Tensor::zeros({3, 4}, DType::f32);
  const std::string isa = kernels::gemm_cpu_isa();
  const bool below_avx512 = isa == "sse41" || isa == "avx" || isa == "avx2" || isa == "avx2_vnni";
  if (!below_avx512) {
    EXPECT_NO_THROW(kernels::matmul(a, false, b, false, c, false)) << isa;
    return;
  }
  try {
    kernels::matmul(a, false, b, false, c, false);
    FAIL() << "a bf16 matmul ran on " << isa;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("oneDNN has no bf16 matmul [3x4x5] for this CPU's instruction set (" + isa +
                                         "): bf16 compute and FP8 need AVX512_CORE or newer"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tessel
