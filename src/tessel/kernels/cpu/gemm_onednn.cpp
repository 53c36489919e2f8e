// GEMM through oneDNN's matmul primitive (AMX / AVX-512 BF16 / AVX-512 kernels chosen at run time).
// Primitives are cached by problem signature: creation costs far more than a small GEMM.
//
// The cache stays bounded when the number of tokens changes from call to call (the rows each MoE
// expert gets): a primitive is only ever made for a size class (core/size_class.h) of the token
// dimension, so a run needs a few dozen per call site. The token dimension is M when A is not
// transposed (forward, input gradient) and K when A is transposed and B is not (weight gradient:
// dY^T X); the other dimensions are feature sizes, fixed per call site, and stay exact.
// - M: the rows are cut into chunks whose sizes are classes (largest first). Each row of C depends
//   only on its row of op(A), and oneDNN computes a row alike whatever M is, except a lone row: no
//   chunk of 1 row is cut from a bigger M. Results are those of one exact-M GEMM (tested) on the
//   AVX-512 kernels (brgemm); oneDNN's AVX2 sgemm sums the rows of a short tail of its 6-row tiles,
//   and where threads' shares meet, in another order, so there the rows of any GEMM depend on M in
//   the last bits, chunked or not.
// - K: op(A) and op(B) are copied into zero-padded buffers of the class of K; the zero products add
//   nothing. On this machine's AVX-512 BF16 kernels this gives the exact-K result bit for bit (checked
//   for f32 and bf16 at 1 and 2 threads); kernels of other ISAs may differ from an exact-K GEMM in the
//   last bit, deterministically.
// oneDNN's runtime dimensions (DNNL_RUNTIME_DIM_VAL) would avoid both, but oneDNN 2.6 then falls back
// from its brgemm kernels to a generic GEMM that is slower and sums in another order.
//
// bf16 below AVX-512: oneDNN has bf16 matmul kernels only from AVX512_CORE on, so on a CPU without
// AVX-512 (AMD Zen 2/3, older Intel) or under ONEDNN_MAX_CPU_ISA=AVX2 the bf16 operands are widened to
// fp32 (exact) and multiplied by the fp32 kernels. That is still a bf16 GEMM with fp32 accumulation:
// a product of two bf16 values (8-bit significands) is exact in fp32 (24 bits), as in the bf16
// kernels, and the sum is fp32; only the summation order differs, as between any two ISAs.
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include "tessel/core/check.h"
#include "tessel/core/size_class.h"
#include "tessel/kernels/gemm.h"

namespace tessel::kernels {
namespace {

using dnnl::memory;

// Dimensions up to this size are their own class (the M of a lone expert row must stay exact).
constexpr int64_t kExactDims = 16;
// A safety bound on the cache: call sites whose N or leading dimensions vary (none in tessel) would
// otherwise grow it; the least recently used primitive goes first.
constexpr size_t kMaxPrimitives = 4096;

using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, int, int, int, int>;

struct Entry {
  dnnl::matmul prim;
  uint64_t last_use;
};

struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<Key, Entry> cache;
  uint64_t uses = 0;
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

void evict_least_recently_used(Context& cx) {
  auto oldest = cx.cache.begin();
  for (auto it = cx.cache.begin(); it != cx.cache.end(); ++it)
    if (it->second.last_use < oldest->second.last_use) oldest = it;
  cx.cache.erase(oldest);
}

// One oneDNN matmul of an exact shape, its primitive cached.
void run_primitive(int64_t M, int64_t N, int64_t K, DType ab_dtype, GemmOperand a, GemmOperand b, float* c,
                   int64_t ldc, bool accumulate, const float* bias) {
  Context& cx = ctx();
  // The thread count is part of the key: a primitive partitions its work for the threads it was made for.
  const Key key = std::make_tuple(M, N, K, a.ld, b.ld, ldc, int(a.trans), int(b.trans), int(ab_dtype), int(accumulate),
                                  int(bias != nullptr), omp_get_max_threads());
  const memory::data_type dt = to_dnnl(ab_dtype);
  // op(A) is [M, K]: stored [M, K] (strides {lda, 1}) or [K, M] (strides {1, lda}).
  const memory::desc a_md({M, K}, dt, a.trans ? memory::dims{1, a.ld} : memory::dims{a.ld, 1});
  const memory::desc b_md({K, N}, dt, b.trans ? memory::dims{1, b.ld} : memory::dims{b.ld, 1});
  const memory::desc c_md({M, N}, memory::data_type::f32, memory::dims{ldc, 1});
  const memory::desc bias_md({1, N}, memory::data_type::f32, memory::dims{N, 1});
  dnnl::matmul prim;
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
      dnnl::matmul::primitive_desc pd;
      try {
        pd = dnnl::matmul::primitive_desc(desc, attr, cx.engine);
      } catch (const dnnl::error& e) {
        // bf16 without bf16 kernels never gets here (gemm widens it); name the problem instead of
        // oneDNN's "could not create a primitive descriptor".
        TESSEL_FAIL("oneDNN has no {} matmul [{}x{}x{}] for this CPU's instruction set ({}): {}",
                    dtype_name(ab_dtype), M, N, K, gemm_cpu_isa(), e.what());
      }
      if (cx.cache.size() >= kMaxPrimitives) evict_least_recently_used(cx);
      it = cx.cache.emplace(key, Entry{dnnl::matmul(pd), 0}).first;
    }
    it->second.last_use = ++cx.uses;
    prim = it->second.prim;  // a handle: stays valid if another thread evicts the entry
  }
  memory am(a_md, cx.engine, const_cast<void*>(a.data));
  memory bm(b_md, cx.engine, const_cast<void*>(b.data));
  memory cm(c_md, cx.engine, c);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
  if (bias) args.emplace(DNNL_ARG_BIAS, memory(bias_md, cx.engine, const_cast<float*>(bias)));
  prim.execute(cx.stream, args);
  cx.stream.wait();
}

// op(X) with its inner dimension K zero-padded to Kc, for X stored with K as its rows (A transposed,
// B not); `outer` is its other dimension (M or N).
GemmOperand pad_inner(const GemmOperand& x, int64_t outer, int64_t K, int64_t Kc, DType dt, Tensor& keep) {
  keep = Tensor::empty({Kc, outer}, dt, Device::cpu);
  const size_t es = dtype_size(dt), row_bytes = size_t(outer) * es;
  auto* dst = static_cast<char*>(keep.raw());
  for (int64_t r = 0; r < K; ++r)
    std::memcpy(dst + size_t(r) * row_bytes, static_cast<const char*>(x.data) + size_t(r * x.ld) * es, row_bytes);
  std::memset(dst + size_t(K) * row_bytes, 0, size_t(Kc - K) * row_bytes);  // zeros of every dtype are all-zero bits
  return {keep.raw(), outer, x.trans};
}

// Whether oneDNN has bf16 matmul kernels on this CPU (after any ONEDNN_MAX_CPU_ISA cap, which oneDNN
// reads once): asked once by creating the descriptor of a small bf16 matmul.
bool bf16_matmul_available() {
  static const bool available = [] {
    const memory::desc md({16, 16}, memory::data_type::bf16, memory::dims{16, 1});
    const memory::desc c_md({16, 16}, memory::data_type::f32, memory::dims{16, 1});
    try {
      dnnl::matmul::primitive_desc(dnnl::matmul::desc(md, md, c_md), ctx().engine);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return available;
}

// A stored bf16 matrix (rows x cols at leading dimension x.ld) widened into a dense fp32 copy of
// rows_out >= rows rows, the rows past `rows` zero (the K padding of pad_inner, in the same copy).
GemmOperand widen_bf16(const GemmOperand& x, int64_t rows, int64_t cols, int64_t rows_out, Tensor& keep) {
  keep = Tensor::empty({rows_out, cols}, DType::f32, Device::cpu);
  const auto* src = static_cast<const bf16*>(x.data);
  float* dst = keep.data<float>();
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 16))
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = float(src[r * x.ld + c]);
  std::memset(dst + rows * cols, 0, size_t((rows_out - rows) * cols) * sizeof(float));
  return {dst, cols, x.trans};
}

}  // namespace

bool gemm_widens_bf16() { return !bf16_matmul_available(); }

std::vector<GemmScratch> gemm_cpu_workspace(int64_t M, int64_t N, int64_t K, DType ab_dtype, bool trans_a,
                                            bool trans_b) {
  // The copies gemm() below makes, in its order (keep the two in step).
  if (M == 0 || N == 0 || K == 0) return {};
  const bool tokens_in_k = trans_a && !trans_b;
  const int64_t Kc = tokens_in_k ? size_class_ceil(K, kExactDims) : K;
  if (ab_dtype == DType::bf16 && !bf16_matmul_available()) {
    const int64_t a_rows = trans_a ? K : M, b_rows = trans_b ? N : K;
    return {{{tokens_in_k ? Kc : a_rows, trans_a ? M : K}, DType::f32},
            {{tokens_in_k ? Kc : b_rows, trans_b ? K : N}, DType::f32}};
  }
  if (Kc != K) return {{{Kc, M}, ab_dtype}, {{Kc, N}, ab_dtype}};
  return {};
}

void gemm(int64_t M, int64_t N, int64_t K, DType ab_dtype, GemmOperand a, GemmOperand b, float* c, int64_t ldc,
          bool accumulate, const float* bias) {
  if (M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum: C = (C if accumulating, else 0) + bias; oneDNN rejects K = 0
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) c[i * ldc + j] = (accumulate ? c[i * ldc + j] : 0.0f) + (bias ? bias[j] : 0.0f);
    return;
  }
  to_dnnl(ab_dtype);  // an unsupported dtype fails before any copy
  const bool tokens_in_k = a.trans && !b.trans;
  const int64_t Kc = tokens_in_k ? size_class_ceil(K, kExactDims) : K;
  MemoryCategoryScope scratch(MemoryCategory::workspace);
  Tensor a_copy, b_copy;  // widened and/or K-padded operands, held until the GEMM has run
  if (ab_dtype == DType::bf16 && !bf16_matmul_available()) {
    // bf16 operands widened to fp32 where oneDNN has no bf16 kernels. With tokens in K both are
    // stored with K as their rows, and the one copy carries the zero padding to Kc as well.
    const int64_t a_stored_rows = a.trans ? K : M, b_stored_rows = b.trans ? N : K;
    a = widen_bf16(a, a_stored_rows, a.trans ? M : K, tokens_in_k ? Kc : a_stored_rows, a_copy);
    b = widen_bf16(b, b_stored_rows, b.trans ? K : N, tokens_in_k ? Kc : b_stored_rows, b_copy);
    ab_dtype = DType::f32;
  } else if (Kc != K) {
    a = pad_inner(a, M, K, Kc, ab_dtype, a_copy);
    b = pad_inner(b, N, K, Kc, ab_dtype, b_copy);
  }
  if (a.trans) {
    run_primitive(M, N, Kc, ab_dtype, a, b, c, ldc, accumulate, bias);
    return;
  }
  const size_t es = dtype_size(ab_dtype);
  for (int64_t row = 0; row < M;) {
    const int64_t left = M - row;
    int64_t rows = size_class_floor(left, kExactDims);
    while (left - rows == 1) rows = size_class_floor(rows - 1, kExactDims);  // never leave a lone row
    const auto* a_rows = static_cast<const char*>(a.data) + size_t(row * a.ld) * es;
    run_primitive(rows, N, K, ab_dtype, {a_rows, a.ld, false}, b, c + row * ldc, ldc, accumulate, bias);
    row += rows;
  }
}

size_t gemm_cached_primitives() {
  std::lock_guard<std::mutex> lock(ctx().mu);
  return ctx().cache.size();
}

std::string gemm_cpu_isa() {
  using dnnl::cpu_isa;
  switch (dnnl::get_effective_cpu_isa()) {
    case cpu_isa::sse41: return "sse41";
    case cpu_isa::avx: return "avx";
    case cpu_isa::avx2: return "avx2";
    case cpu_isa::avx2_vnni: return "avx2_vnni";
    case cpu_isa::avx512_core: return "avx512_core";
    case cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "isa-" + std::to_string(int(dnnl::get_effective_cpu_isa()));
  }
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
