// GEMM through oneDNN's matmul primitive (AMX / AVX-512 BF16 / AVX-512 kernels chosen at run time).
// Primitives are cached by problem signature: creation costs far more than a small GEMM.
//
// The cache stays bounded when the number of tokens changes from call to call (the rows each MoE
// expert gets): a primitive is only ever made for a size class (core/size_class.h) of the token
// dimension, so a run needs a few dozen per call site. The token dimension is M when A is not
// transposed (forward, input gradient) and K when A is transposed and B is not (weight gradient:
// dY^T X); the other dimensions are feature sizes, fixed per call site, and stay exact.
// - M: the rows are computed in chunks whose sizes are classes. Each row of C depends only on its
//   row of op(A), and oneDNN computes a row alike whatever M is, except a lone row: no chunk of 1 row
//   is cut from a bigger M. A GEMM that overwrites C runs its largest class and then a power-of-two
//   chunk that ends at row M and overlaps rows already written (they come out the same); one that
//   accumulates cuts M into classes that add up to it. Results are those of one exact-M GEMM
//   (tested) on the AVX-512 kernels (brgemm); oneDNN's AVX2 sgemm sums the rows of a short tail of
//   its 6-row tiles, and where threads' shares meet, in another order, so there the rows of any
//   GEMM depend on M in the last bits, chunked or not.
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
#include <malloc.h>
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <bit>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <unordered_map>

#include "tessel/core/check.h"
#include "tessel/core/size_class.h"
#include "tessel/kernels/gemm.h"
#include "tessel/kernels/gemm_primitive_census.h"
#include "tessel/kernels/workspace.h"

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
  memory::desc scratchpad;  // user-provided scratchpad (accounted workspace), empty when none is needed
};

struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<Key, Entry> cache;
  std::map<Key, size_t> scratch_sizes;  // scratchpads of shapes asked for but not run (dry runs)
  std::map<Key, int64_t> heap_bytes_of;  // the heap a primitive held when this process first made it
  bool census_open = false;              // GemmPrimitiveCensus
  std::set<Key> census;
  int64_t census_bytes = 0;
  int64_t census_made = 0;               // primitives it made to measure them
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

// Bytes the process holds from malloc, every arena (glibc), chunk headers included.
int64_t heap_in_use() {
  const struct mallinfo2 m = mallinfo2();
  return int64_t(m.uordblks + m.hblkhd);
}

Key key_of(int64_t M, int64_t N, int64_t K, DType ab_dtype, int64_t lda, bool ta, int64_t ldb, bool tb, int64_t ldc,
           bool accumulate, bool bias) {
  // The thread count is part of the key: a primitive partitions its work for the threads it was made for.
  return std::make_tuple(M, N, K, lda, ldb, ldc, int(ta), int(tb), int(ab_dtype), int(accumulate), int(bias),
                         omp_get_max_threads());
}

// The memory descriptors of one matmul: op(A) [M, K] stored [M, K] (strides {lda, 1}) or [K, M]
// (strides {1, lda}); B likewise; C [M, N] f32 at ldc; bias [1, N].
struct Descs {
  memory::desc a, b, c, bias;
  Descs(int64_t M, int64_t N, int64_t K, memory::data_type dt, int64_t lda, bool ta, int64_t ldb, bool tb, int64_t ldc)
      : a({M, K}, dt, ta ? memory::dims{1, lda} : memory::dims{lda, 1}),
        b({K, N}, dt, tb ? memory::dims{1, ldb} : memory::dims{ldb, 1}),
        c({M, N}, memory::data_type::f32, memory::dims{ldc, 1}),
        bias({1, N}, memory::data_type::f32, memory::dims{N, 1}) {}
};

dnnl::matmul::primitive_desc make_primitive_desc(const Context& cx, const Descs& d, int64_t M, int64_t N, int64_t K,
                                                 DType ab_dtype, bool accumulate, bool bias) {
  dnnl::primitive_attr attr;
  // oneDNN's scratch comes from tessel's allocator (workspace), not from oneDNN's own buffers,
  // so it is accounted, and a dry run accounts it too (gemm_cpu_workspace).
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (accumulate) {
    dnnl::post_ops po;
    po.append_sum(1.0f);
    attr.set_post_ops(po);
  }
  auto desc = bias ? dnnl::matmul::desc(d.a, d.b, d.bias, d.c) : dnnl::matmul::desc(d.a, d.b, d.c);
  try {
    return dnnl::matmul::primitive_desc(desc, attr, cx.engine);
  } catch (const dnnl::error& e) {
    // bf16 without bf16 kernels never gets here (gemm widens it); name the problem instead of
    // oneDNN's "could not create a primitive descriptor".
    TESSEL_FAIL("oneDNN has no {} matmul [{}x{}x{}] for this CPU's instruction set ({}): {}", dtype_name(ab_dtype), M,
                N, K, gemm_cpu_isa(), e.what());
  }
}

// Bytes of user scratchpad one matmul needs (from its cached primitive, else from a primitive
// descriptor, whose sizes are cached too: a dry run asks for shapes it never runs).
size_t scratchpad_bytes(int64_t M, int64_t N, int64_t K, DType ab_dtype, int64_t lda, bool ta, int64_t ldb, bool tb,
                        int64_t ldc, bool accumulate, bool bias) {
  Context& cx = ctx();
  const Key key = key_of(M, N, K, ab_dtype, lda, ta, ldb, tb, ldc, accumulate, bias);
  std::lock_guard<std::mutex> lock(cx.mu);
  if (cx.census_open && !cx.census.count(key)) {
    auto known = cx.heap_bytes_of.find(key);
    if (known == cx.heap_bytes_of.end()) {  // a problem this process has not made: make one, held while measured
      const Descs d(M, N, K, to_dnnl(ab_dtype), lda, ta, ldb, tb, ldc);
      const auto pd = make_primitive_desc(cx, d, M, N, K, ab_dtype, accumulate, bias);
      const int64_t before = heap_in_use();
      try {
        const dnnl::matmul prim(pd);
        known = cx.heap_bytes_of.emplace(key, std::max<int64_t>(0, heap_in_use() - before)).first;
      } catch (const dnnl::error& e) {
        TESSEL_FAIL("oneDNN could not make the {} matmul [{}x{}x{}] whose memory a GEMM primitive census measures: {}",
                    dtype_name(ab_dtype), M, N, K, e.what());
      }
      ++cx.census_made;
    }
    cx.census.insert(key);
    cx.census_bytes += known->second;
  }
  if (auto it = cx.cache.find(key); it != cx.cache.end()) return it->second.scratchpad.get_size();
  if (auto it = cx.scratch_sizes.find(key); it != cx.scratch_sizes.end()) return it->second;
  const Descs d(M, N, K, to_dnnl(ab_dtype), lda, ta, ldb, tb, ldc);
  const size_t bytes = make_primitive_desc(cx, d, M, N, K, ab_dtype, accumulate, bias).scratchpad_desc().get_size();
  if (cx.scratch_sizes.size() >= kMaxPrimitives) cx.scratch_sizes.clear();
  cx.scratch_sizes.emplace(key, bytes);
  return bytes;
}

// One oneDNN matmul of an exact shape, its primitive cached.
// `scratch`: the user scratchpad, at least as large as the primitive's (scratchpad_bytes).
void run_primitive(int64_t M, int64_t N, int64_t K, DType ab_dtype, GemmOperand a, GemmOperand b, float* c,
                   int64_t ldc, bool accumulate, const float* bias, const Tensor& scratch) {
  Context& cx = ctx();
  const Key key = key_of(M, N, K, ab_dtype, a.ld, a.trans, b.ld, b.trans, ldc, accumulate, bias != nullptr);
  const Descs d(M, N, K, to_dnnl(ab_dtype), a.ld, a.trans, b.ld, b.trans, ldc);
  dnnl::matmul prim;
  memory::desc scratch_md;
  {
    std::lock_guard<std::mutex> lock(cx.mu);
    auto it = cx.cache.find(key);
    if (it == cx.cache.end()) {
      if (cx.cache.size() >= kMaxPrimitives) evict_least_recently_used(cx);
      const int64_t before = heap_in_use();
      {
        const auto pd = make_primitive_desc(cx, d, M, N, K, ab_dtype, accumulate, bias != nullptr);
        it = cx.cache.emplace(key, Entry{dnnl::matmul(pd), 0, pd.scratchpad_desc()}).first;
      }  // the descriptor is gone: what stays is the primitive (the first one made counts)
      cx.heap_bytes_of.emplace(key, std::max<int64_t>(0, heap_in_use() - before));
    }
    it->second.last_use = ++cx.uses;
    prim = it->second.prim;  // a handle: stays valid if another thread evicts the entry
    scratch_md = it->second.scratchpad;
  }
  TESSEL_CHECK(scratch_md.get_size() == 0 || (scratch.defined() && scratch.nbytes() >= scratch_md.get_size()),
               "gemm: the matmul needs {} bytes of scratchpad, given {}", scratch_md.get_size(),
               scratch.defined() ? scratch.nbytes() : 0);
  memory am(d.a, cx.engine, const_cast<void*>(a.data));
  memory bm(d.b, cx.engine, const_cast<void*>(b.data));
  memory cm(d.c, cx.engine, c);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
  if (bias) args.emplace(DNNL_ARG_BIAS, memory(d.bias, cx.engine, const_cast<float*>(bias)));
  if (scratch_md.get_size() > 0) args.emplace(DNNL_ARG_SCRATCHPAD, memory(scratch_md, cx.engine, scratch.raw()));
  prim.execute(cx.stream, args);
  cx.stream.wait();
}

// op(X) with its inner dimension K zero-padded to Kc, for X stored with K as its rows (A transposed,
// B not); `outer` is its other dimension (M or N).
GemmOperand pad_inner(const GemmOperand& x, int64_t outer, int64_t K, int64_t Kc, DType dt, Tensor& keep) {
  keep = kernel_workspace({Kc, outer}, dt);
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
  keep = kernel_workspace({rows_out, cols}, DType::f32);
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

namespace {

// What gemm() does for one call: the operand copies it makes (bf16 widened to fp32 where there are
// no bf16 kernels; with tokens in K, zero-padded to a size class Kc), and the matmul primitives it
// runs on the operands after them, each on rows [row, row + M) of op(A) with contraction K.
struct PrimitiveCall {
  int64_t row, M, K;
};
struct GemmPlan {
  bool widen = false, pad = false;
  int64_t Kc = 0;
  DType dt = DType::f32;     // the primitives' operand dtype
  int64_t lda = 0, ldb = 0;  // leading dimensions after the copies
  std::vector<GemmScratch> copies;
  std::vector<PrimitiveCall> calls;
};

GemmPlan plan_gemm(int64_t M, int64_t N, int64_t K, DType ab_dtype, bool ta, int64_t lda, bool tb, int64_t ldb,
                   bool accumulate) {
  GemmPlan p;
  const bool tokens_in_k = ta && !tb;
  p.Kc = tokens_in_k ? size_class_ceil(K, kExactDims) : K;
  p.dt = ab_dtype;
  p.lda = lda;
  p.ldb = ldb;
  if (ab_dtype == DType::bf16 && !bf16_matmul_available()) {
    // Both widened copies are dense; with tokens in K they are stored with K as their rows, and the
    // one copy carries the zero padding to Kc as well.
    const int64_t a_rows = ta ? K : M, b_rows = tb ? N : K, a_cols = ta ? M : K, b_cols = tb ? K : N;
    p.widen = true;
    p.dt = DType::f32;
    p.copies = {{{tokens_in_k ? p.Kc : a_rows, a_cols}, DType::f32}, {{tokens_in_k ? p.Kc : b_rows, b_cols}, DType::f32}};
    p.lda = a_cols;
    p.ldb = b_cols;
  } else if (p.Kc != K) {
    p.pad = true;
    p.copies = {{{p.Kc, M}, ab_dtype}, {{p.Kc, N}, ab_dtype}};
    p.lda = M;
    p.ldb = N;
  }
  if (ta) {
    p.calls.push_back({0, M, p.Kc});
    return p;
  }
  // Rows in size classes: one primitive per class, so the cache stays bounded whatever M is.
  if (!accumulate && M > kExactDims) {
    // C is overwritten: the largest class <= M, then the rows left (fewer than the classes'
    // spacing) as the last R rows of C, R the power of two that holds them (at least kExactDims).
    // Those R rows overlap rows already written, which are computed again from the same rows of
    // op(A) and come out the same (bit for bit on the AVX-512 kernels; on AVX2's the tail's values
    // stay, deterministically), so every remainder shares a few primitives (16, 32, 64, ...)
    // instead of one per remainder: half the primitives of a MoE run.
    const int64_t head = size_class_floor(M, kExactDims);
    p.calls.push_back({0, head, K});
    if (head < M) {
      const int64_t tail = std::max(kExactDims, int64_t(std::bit_ceil(uint64_t(M - head))));
      p.calls.push_back({M - tail, tail, K});
    }
    return p;
  }
  // C accumulates: no row may be computed twice, so the rows are cut into classes that add up to M.
  for (int64_t row = 0; row < M;) {
    const int64_t left = M - row;
    int64_t rows = size_class_floor(left, kExactDims);
    while (left - rows == 1) rows = size_class_floor(rows - 1, kExactDims);  // never leave a lone row
    p.calls.push_back({row, rows, K});
    row += rows;
  }
  return p;
}

}  // namespace

GemmWorkspace gemm_cpu_workspace(int64_t M, int64_t N, int64_t K, DType ab_dtype, bool trans_a, int64_t lda,
                                 bool trans_b, int64_t ldb, int64_t ldc, bool accumulate, bool bias) {
  if (M == 0 || N == 0 || K == 0) return {};
  to_dnnl(ab_dtype);
  const GemmPlan p = plan_gemm(M, N, K, ab_dtype, trans_a, lda, trans_b, ldb, accumulate);
  GemmWorkspace w{p.copies, {}};
  for (const PrimitiveCall& call : p.calls)
    w.scratchpads.push_back(
        scratchpad_bytes(call.M, N, call.K, p.dt, p.lda, trans_a, p.ldb, trans_b, ldc, accumulate, bias));
  return w;
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
  const DeviceAccessScope on_device;  // a kernel: its workspace is device memory (inside a dispatch point: nothing to do)
  const GemmPlan p = plan_gemm(M, N, K, ab_dtype, a.trans, a.ld, b.trans, b.ld, accumulate);
  Tensor a_copy, b_copy;  // widened and/or K-padded operands, held until the GEMM has run
  if (p.widen) {
    a = widen_bf16(a, a.trans ? K : M, p.copies[0].shape[1], p.copies[0].shape[0], a_copy);
    b = widen_bf16(b, b.trans ? N : K, p.copies[1].shape[1], p.copies[1].shape[0], b_copy);
  } else if (p.pad) {
    a = pad_inner(a, M, K, p.Kc, ab_dtype, a_copy);
    b = pad_inner(b, N, K, p.Kc, ab_dtype, b_copy);
  }
  size_t scratch_bytes = 0;  // one scratchpad, the largest call's, serves them all in turn
  for (const PrimitiveCall& call : p.calls)
    scratch_bytes = std::max(scratch_bytes, scratchpad_bytes(call.M, N, call.K, p.dt, p.lda, a.trans, p.ldb, b.trans, ldc,
                                                             accumulate, bias != nullptr));
  const Tensor scratch = scratch_bytes ? kernel_workspace(gemm_scratchpad_shape(scratch_bytes), DType::i32) : Tensor();
  const size_t es = dtype_size(p.dt);
  for (const PrimitiveCall& call : p.calls) {
    const auto* a_rows = static_cast<const char*>(a.data) + size_t(call.row * a.ld) * es;  // untransposed A only
    run_primitive(call.M, N, call.K, p.dt, {a_rows, a.ld, a.trans}, b, c + call.row * ldc, ldc, accumulate, bias,
                  scratch);
  }
}

GemmPrimitiveCensus::GemmPrimitiveCensus() {
  Context& cx = ctx();
  std::lock_guard<std::mutex> lock(cx.mu);
  TESSEL_CHECK(!cx.census_open, "GemmPrimitiveCensus: one is open already (one at a time in a process)");
  cx.census_open = true;
  cx.census.clear();
  cx.census_bytes = 0;
  cx.census_made = 0;
}

GemmPrimitiveCensus::~GemmPrimitiveCensus() {
  Context& cx = ctx();
  std::lock_guard<std::mutex> lock(cx.mu);
  cx.census_open = false;
  cx.census.clear();
  if (cx.census_made > 0) {
    // oneDNN's own primitive cache keeps what the census made: emptied, so that a planner in a
    // training process (parallel.auto) holds none of the layouts it tried. The primitives gemm()
    // runs stay: its cache holds them itself.
    const int capacity = dnnl::get_primitive_cache_capacity();
    dnnl::set_primitive_cache_capacity(0);
    dnnl::set_primitive_cache_capacity(capacity);
  }
}

int64_t GemmPrimitiveCensus::primitives() const {
  std::lock_guard<std::mutex> lock(ctx().mu);
  return int64_t(ctx().census.size());
}

int64_t GemmPrimitiveCensus::heap_bytes() const {
  std::lock_guard<std::mutex> lock(ctx().mu);
  return ctx().census_bytes;
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
  // The GEMMs run here, on this thread, when timed: inside an explicit host scope a launch runs at
  // once (strict mode would otherwise queue it, and the clock would time the launch, on another
  // thread's OpenMP team).
  const DeviceAccessScope on_this_thread;
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
