// bf16 GEMMs where oneDNN has no bf16 matmul (below AVX512_CORE: a CPU without AVX-512 such as AMD
// Zen 2/3, or ONEDNN_MAX_CPU_ISA=AVX2 as ctest's isa_avx2.* runs this) widen the operands to fp32 and
// use the fp32 kernels; on every other instruction set they run oneDNN's bf16 kernels. Either way the
// result is checked against float64 in gemm_test.cpp (GemmTest.MatchesDoubleReference, bf16 cases);
// here: the path is chosen by the ISA, and the widened path is exactly the fp32 GEMM of the widened
// operands, for every transpose and for leading dimensions wider than the matrix.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "support/host_access.h"
#include "reference.h"
#include "tessel/core/tensor.h"
#include "tessel/kernels/gemm.h"

namespace tessel {
namespace {

bool below_avx512(const std::string& isa) { return isa == "sse41" || isa == "avx" || isa == "avx2" || isa == "avx2_vnni"; }

TEST(GemmIsa, Bf16WidensExactlyWhereOneDnnHasNoBf16Kernels) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  const std::string isa = kernels::gemm_cpu_isa();
  ASSERT_EQ(kernels::gemm_widens_bf16(), below_avx512(isa)) << isa;
  const int64_t M = 37, N = 21, K = 70, pad = 3;  // stored with leading dimension cols + pad
  testref::Rand rnd(11);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
      Tensor a16 = Tensor::empty({ar, ac + pad}, DType::bf16), b16 = Tensor::empty({br, bc + pad}, DType::bf16);
      Tensor a32 = Tensor::empty({ar, ac + pad}, DType::f32), b32 = Tensor::empty({br, bc + pad}, DType::f32);
      for (auto [t16, t32] : {std::pair{&a16, &a32}, std::pair{&b16, &b32}})
        for (int64_t i = 0; i < t16->numel(); ++i) {
          t16->data<bf16>()[i] = bf16(float(rnd.normal()));
          t32->data<float>()[i] = float(t16->data<bf16>()[i]);
        }
      Tensor c16 = Tensor::zeros({M, N}, DType::f32), c32 = Tensor::zeros({M, N}, DType::f32);
      kernels::gemm(M, N, K, DType::bf16, {a16.raw(), ac + pad, ta}, {b16.raw(), bc + pad, tb}, c16.data<float>(), N,
                    false);
      kernels::gemm(M, N, K, DType::f32, {a32.raw(), ac + pad, ta}, {b32.raw(), bc + pad, tb}, c32.data<float>(), N,
                    false);
      double worst = 0, largest = 0;
      for (int64_t i = 0; i < M * N; ++i) {
        worst = std::max(worst, std::abs(double(c16.data<float>()[i]) - c32.data<float>()[i]));
        largest = std::max(largest, std::abs(double(c32.data<float>()[i])));
      }
      if (kernels::gemm_widens_bf16()) {
        EXPECT_EQ(std::memcmp(c16.raw(), c32.raw(), size_t(M * N) * 4), 0) << "ta=" << ta << " tb=" << tb;
      } else {  // oneDNN's bf16 kernels: same products, fp32 sums in their own order
        EXPECT_LT(worst / largest, testref::Tol<float>::rel) << isa << " ta=" << ta << " tb=" << tb;
      }
    }
}

}  // namespace
}  // namespace tessel
