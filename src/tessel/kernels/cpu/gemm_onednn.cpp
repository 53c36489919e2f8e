// GEMM through oneDNN's matmul primitive (AMX / AVX-512 BF16 / AVX-512 kernels chosen at run time).
// Primitives are cached by problem signature: creation costs far more than a small GEMM.
#include <oneapi/dnnl/dnnl.hpp>

#include <chrono>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include "tessel/kernels/gemm.h"

namespace tessel::kernels {
namespace {

using dnnl::memory;

struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, int, int, int>, dnnl::matmul>
      cache;
  std::mutex mu;
};

Context& ctx() {
  static Context c;
  return c;
}

memory::data_type to_dnnl(DType t) {
  switch (t) {
    case DType::f32: return memory::data_type::f32;
    case DType::bf16: return memory::data_type::bf16;
    case DType::f16: return memory::data_type::f16;
    default: TESSEL_FAIL("gemm: unsupported operand dtype {} (allowed: f32, bf16, f16)", dtype_name(t));
  }
}

}  // namespace

void gemm(int64_t M, int64_t N, int64_t K, DType ab_dtype, GemmOperand a, GemmOperand b, float* c, int64_t ldc,
          bool accumulate, const float* bias) {
  if (M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum: C = (C if accumulating, else 0) + bias; oneDNN rejects K = 0
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) c[i * ldc + j] = (accumulate ? c[i * ldc + j] : 0.0f) + (bias ? bias[j] : 0.0f);
    return;
  }
  Context& cx = ctx();
  const auto key = std::make_tuple(M, N, K, a.ld, b.ld, ldc, int(a.trans), int(b.trans), int(ab_dtype),
                                   int(accumulate), int(bias != nullptr));
  const memory::data_type dt = to_dnnl(ab_dtype);
  // op(A) is [M, K]: stored [M, K] (strides {lda, 1}) or [K, M] (strides {1, lda}).
  const memory::desc a_md({M, K}, dt, a.trans ? memory::dims{1, a.ld} : memory::dims{a.ld, 1});
  const memory::desc b_md({K, N}, dt, b.trans ? memory::dims{1, b.ld} : memory::dims{b.ld, 1});
  const memory::desc c_md({M, N}, memory::data_type::f32, memory::dims{ldc, 1});
  const memory::desc bias_md({1, N}, memory::data_type::f32, memory::dims{N, 1});
  dnnl::matmul* prim;
  {
    std::lock_guard<std::mutex> lock(cx.mu);
    auto it = cx.cache.find(key);
    if (it == cx.cache.end()) {
      dnnl::primitive_attr attr;
      if (accumulate) {
        dnnl::post_ops po;
        po.append_sum(1.0f);
        attr.set_post_ops(po);
      }
      auto desc = bias ? dnnl::matmul::desc(a_md, b_md, bias_md, c_md) : dnnl::matmul::desc(a_md, b_md, c_md);
      dnnl::matmul::primitive_desc pd(desc, attr, cx.engine);
      it = cx.cache.emplace(key, dnnl::matmul(pd)).first;
    }
    prim = &it->second;
  }
  memory am(a_md, cx.engine, const_cast<void*>(a.data));
  memory bm(b_md, cx.engine, const_cast<void*>(b.data));
  memory cm(c_md, cx.engine, c);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
  if (bias) args.emplace(DNNL_ARG_BIAS, memory(bias_md, cx.engine, const_cast<float*>(bias)));
  prim->execute(cx.stream, args);
  cx.stream.wait();
}

void matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, bool accumulate,
            const float* bias) {
  TESSEL_CHECK(a.dim() == 2 && b.dim() == 2 && c.dim() == 2, "matmul needs 2-D tensors, got {} {} {}", a.str(),
               b.str(), c.str());
  TESSEL_CHECK(a.dtype() == b.dtype(), "matmul operands differ in dtype: {} vs {}", a.str(), b.str());
  TESSEL_CHECK(c.dtype() == DType::f32, "matmul output must be f32, got {}", c.str());
  TESSEL_CHECK(a.stride(1) == 1 && b.stride(1) == 1 && c.stride(1) == 1, "matmul needs row-major operands");
  const int64_t M = trans_a ? a.size(1) : a.size(0), K = trans_a ? a.size(0) : a.size(1);
  const int64_t Kb = trans_b ? b.size(1) : b.size(0), N = trans_b ? b.size(0) : b.size(1);
  TESSEL_CHECK(K == Kb && c.size(0) == M && c.size(1) == N, "matmul shape mismatch: op({}) @ op({}) -> {}", a.str(),
               b.str(), c.str());
  gemm(M, N, K, a.dtype(), {a.raw(), a.stride(0), trans_a}, {b.raw(), b.stride(0), trans_b}, c.data<float>(),
       c.stride(0), accumulate, bias);
}

double measure_gemm_gflops(DType dtype, int64_t n, int reps) {
  Tensor a = Tensor::zeros({n, n}, dtype), b = Tensor::zeros({n, n}, dtype), c = Tensor::zeros({n, n}, DType::f32);
  a.fill(0.5);
  b.fill(0.25);
  matmul(a, false, b, true, c, false);  // warm-up (primitive creation, page faults)
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    matmul(a, false, b, true, c, false);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * double(n) * double(n) * double(n) / best / 1e9;
}

}  // namespace tessel::kernels
