#include "tessel/nn/context_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessel/core/memory.h"
#include "tessel/kernels/cpu/elementwise.h"
#include "tessel/kernels/launch.h"
#include "tessel/kernels/op_log.h"

namespace tessel::nn {
namespace {

// Tags of the ring messages (distinct, since a K/V block and a dK/dV block are in flight between
// the same two ranks at once in the backward pass; MPI keeps messages of one tag in order).
constexpr int kTagKv = 0x4350;   // "CP"
constexpr int kTagDkv = 0x4351;

void check_split(int64_t T, int rank, int size) {
  TESSEL_CHECK(size >= 1 && rank >= 0 && rank < size, "context parallel: rank {} of a group of {}", rank, size);
  TESSEL_CHECK(T > 0 && T % (2 * int64_t(size)) == 0,
               "context parallel: sequence length {} is not divisible into 2 x {} equal chunks", T, size);
}

// The global chunk index of local chunk j (0: early, 1: late) of cp rank r of C.
int64_t chunk_index(int r, int C, int j) { return j == 0 ? r : 2 * int64_t(C) - 1 - r; }

// How query chunk a attends to key chunk c (global chunk indices, equal lengths).
enum class PairMode { skip, causal, full };
PairMode pair_mode(int64_t a, int64_t c, bool causal) {
  if (!causal || c < a) return PairMode::full;  // every key precedes every query
  return c == a ? PairMode::causal : PairMode::skip;
}

// The sizes every ring step works with. Chunk buffers are packed: [B*L rows, heads*Dh] (values,
// outputs and their gradients: heads*Dv).
struct Ring {
  kernels::AttentionShape chunk;  // one chunk against one chunk: T = L
  // Local rows; chunk rows; floats of a q, out, k, v and lse chunk.
  int64_t Tl, L, nq, nout, nk, nv, nlse;
  int rank, size, next, prev;

  Ring(const kernels::AttentionShape& local, const comm::Communicator& cp) : chunk(local) {
    TESSEL_CHECK(local.G > 0 && local.H % local.G == 0,
                 "context-parallel attention: {} query heads not divisible into {} kv groups", local.H, local.G);
    TESSEL_CHECK(local.Dv >= 0, "context-parallel attention: value heads of {} columns (0 for the query/key width)",
                 local.Dv);
    TESSEL_CHECK(local.T > 0 && local.T % 2 == 0,
                 "context-parallel attention: {} local rows are not two equal chunks (the global length must be "
                 "divisible by 2 x {} ranks)",
                 local.T, cp.size());
    Tl = local.T;
    L = Tl / 2;
    chunk.T = L;
    nq = local.B * L * local.H * local.Dh;
    nout = local.B * L * local.H * local.dv();
    nk = local.B * L * local.G * local.Dh;
    nv = local.B * L * local.G * local.dv();
    nlse = local.B * local.H * L;
    rank = cp.rank();
    size = cp.size();
    next = (rank + 1) % size;
    prev = (rank + size - 1) % size;
  }
  int64_t qcols() const { return chunk.H * chunk.Dh; }
  int64_t ocols() const { return chunk.H * chunk.dv(); }
  int64_t kcols() const { return chunk.G * chunk.Dh; }
  int64_t vcols() const { return chunk.G * chunk.dv(); }
  // A K/V (or dK/dV) block of one rank: [K chunk 0 | K chunk 1 | V chunk 0 | V chunk 1].
  int64_t kv_block() const { return 2 * nk + 2 * nv; }
  int64_t k_at(int j) const { return j * nk; }
  int64_t v_at(int j) const { return 2 * nk + j * nv; }
};

// Local chunk j of rows [B*Tl, cols] (row stride ld) <-> packed [B*L, cols].
template <class T>
void pack_chunk(const Ring& r, const T* src, int64_t ld, int64_t cols, int j, T* dst) {
  for (int64_t b = 0; b < r.chunk.B; ++b)
    for (int64_t t = 0; t < r.L; ++t)
      std::copy_n(src + (b * r.Tl + j * r.L + t) * ld, cols, dst + (b * r.L + t) * cols);
}
template <class T, class U>
void unpack_chunk(const Ring& r, const T* src, int64_t cols, int j, U* dst, int64_t ld) {
  for (int64_t b = 0; b < r.chunk.B; ++b)
    for (int64_t t = 0; t < r.L; ++t) {
      const T* s = src + (b * r.L + t) * cols;
      U* d = dst + (b * r.Tl + j * r.L + t) * ld;
      for (int64_t c = 0; c < cols; ++c) kernels::store_as(d + c, kernels::to_f32(s[c]));
    }
}

// lse [B, H, Tl] <-> chunk j's [B, H, L].
void pack_lse(const Ring& r, const float* lse, int j, float* dst) {
  for (int64_t bh = 0; bh < r.chunk.B * r.chunk.H; ++bh) std::copy_n(lse + bh * r.Tl + j * r.L, r.L, dst + bh * r.L);
}
void unpack_lse(const Ring& r, const float* src, int j, float* lse) {
  for (int64_t bh = 0; bh < r.chunk.B * r.chunk.H; ++bh) std::copy_n(src + bh * r.L, r.L, lse + bh * r.Tl + j * r.L);
}

// This rank's K/V as one ring block (block: kv_block() floats).
void pack_kv(const Ring& r, const float* k, int64_t ldk, const float* v, int64_t ldv, float* block) {
  for (int j = 0; j < 2; ++j) {
    pack_chunk(r, k, ldk, r.kcols(), j, block + r.k_at(j));
    pack_chunk(r, v, ldv, r.vcols(), j, block + r.v_at(j));
  }
}

// The buffers of one ring attention call, as tensors of the device it runs on, so that the cpu and
// meta devices both account them, by the same sizes: packed chunks and partial results are
// `workspace`, the blocks that travel around the ring (and the gradient blocks swapped with them)
// are `communication`. All live for the whole call, as the ring needs them.
Tensor ring_buffer(int64_t n, DType t, Device d) { return Tensor::empty({n}, t, d); }

struct RingForwardBuffers {
  Tensor qc, acc, lse_acc, part, part_lse;  // both q chunks, their accumulated out and lse; one pair's
  Tensor kv, kv_next;                       // the K/V block held, and the one arriving
  RingForwardBuffers(const Ring& r, Device d) {
    {
      const MemoryCategoryScope tag(MemoryCategory::workspace);
      qc = ring_buffer(2 * r.nq, DType::f32, d);
      acc = ring_buffer(2 * r.nout, DType::f32, d);
      lse_acc = ring_buffer(2 * r.nlse, DType::f32, d);
      part = ring_buffer(r.nout, DType::f32, d);
      part_lse = ring_buffer(r.nlse, DType::f32, d);
    }
    const MemoryCategoryScope tag(MemoryCategory::communication);
    kv = ring_buffer(r.kv_block(), DType::f32, d);
    kv_next = ring_buffer(r.kv_block(), DType::f32, d);
  }
};

struct RingBackwardBuffers {
  Tensor qc, doc, lsec, dq_acc, oc;  // this rank's q, dout, lse, out (dtype of out) chunks; dq summed
  Tensor dq_s, dk_s, dv_s;           // one chunk pair's gradients
  Tensor kv, kv_next;                // as forward
  Tensor dkv_acc, dkv_out, dkv_in;   // dK/dV blocks: this step's sum, the one sent on, the one arriving
  RingBackwardBuffers(const Ring& r, DType out_dtype, Device d) {
    {
      const MemoryCategoryScope tag(MemoryCategory::workspace);
      qc = ring_buffer(2 * r.nq, DType::f32, d);
      doc = ring_buffer(2 * r.nout, DType::f32, d);
      lsec = ring_buffer(2 * r.nlse, DType::f32, d);
      dq_acc = ring_buffer(2 * r.nq, DType::f32, d);
      oc = ring_buffer(2 * r.nout, out_dtype, d);
      dq_s = ring_buffer(r.nq, DType::f32, d);
      dk_s = ring_buffer(r.nk, DType::f32, d);
      dv_s = ring_buffer(r.nv, DType::f32, d);
    }
    const MemoryCategoryScope tag(MemoryCategory::communication);
    kv = ring_buffer(r.kv_block(), DType::f32, d);
    kv_next = ring_buffer(r.kv_block(), DType::f32, d);
    dkv_acc = ring_buffer(r.kv_block(), DType::f32, d);
    dkv_out = ring_buffer(r.kv_block(), DType::f32, d);
    dkv_in = ring_buffer(r.kv_block(), DType::f32, d);
  }
};

// Sends `out` to the next rank and receives a block of the same size from the previous one.
struct RingTransfer {
  std::unique_ptr<comm::Work> send, recv;
  void start(comm::Communicator& cp, const Ring& r, const float* out, float* in, int tag) {
    const comm::OverlappedCommScope behind_attention;  // the ring's next block moves while this one is computed
    recv = cp.recv_async(in, r.kv_block(), DType::f32, r.prev, tag);
    send = cp.send_async(out, r.kv_block(), DType::f32, r.next, tag);
  }
  void wait() {
    if (recv) recv->wait();
    if (send) send->wait();
    recv.reset();
    send.reset();
  }
};

// Online-softmax merge of a partial result (out_j, lse_j) over some keys into the accumulated one
// (both [B*L, H*Dv] fp32 and [B, H, L]): lse = log(e^lse_acc + e^lse_j),
// out_acc = out_acc * e^(lse_acc - lse) + out_j * e^(lse_j - lse).
void merge_partial(const Ring& r, const float* out_j, const float* lse_j, float* out_acc, float* lse_acc) {
  const int64_t H = r.chunk.H, Dv = r.chunk.dv();
  for (int64_t b = 0; b < r.chunk.B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < r.L; ++t) {
        const int64_t li = (b * H + h) * r.L + t;
        const float la = lse_acc[li], lb = lse_j[li];
        const float m = std::max(la, lb);  // lb is finite: every computed row sees at least one key
        const float lse = m + std::log(std::exp(la - m) + std::exp(lb - m));
        const float wa = std::exp(la - lse), wb = std::exp(lb - lse);
        float* o = out_acc + (b * r.L + t) * H * Dv + h * Dv;
        const float* p = out_j + (b * r.L + t) * H * Dv + h * Dv;
        for (int64_t d = 0; d < Dv; ++d) o[d] = o[d] * wa + p[d] * wb;
        lse_acc[li] = lse;
      }
}

void add_into(float* dst, const float* src, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

}  // namespace

int64_t cp_global_position(int64_t t, int64_t T, int rank, int size) {
  check_split(T, rank, size);
  const int64_t L = T / (2 * int64_t(size));
  TESSEL_CHECK(t >= 0 && t < 2 * L, "context parallel: local row {} outside [0, {})", t, 2 * L);
  return t < L ? chunk_index(rank, size, 0) * L + t : chunk_index(rank, size, 1) * L + (t - L);
}

Tensor cp_local_slice(const Tensor& batch, int rank, int size) {
  TESSEL_CHECK(batch.dim() >= 2, "context parallel: slicing needs a [B, T, ...] batch, got {}", batch.str());
  const Tensor src = batch.is_contiguous() ? batch : batch.clone();
  const int64_t B = src.size(0), T = src.size(1);
  check_split(T, rank, size);
  const int64_t L = T / (2 * int64_t(size));
  Shape shape = src.shape();
  shape[1] = 2 * L;
  Tensor out = Tensor::empty(shape, src.dtype(), src.device());
  if (out.is_meta()) return out;
  const DeviceAccessScope device_op;  // a copy on the device
  const size_t row = src.nbytes() / static_cast<size_t>(B * T);  // bytes per position
  const char* s = static_cast<const char*>(src.raw());
  char* d = static_cast<char*>(out.raw());
  for (int64_t b = 0; b < B; ++b)
    for (int j = 0; j < 2; ++j)
      std::memcpy(d + static_cast<size_t>(b * 2 * L + j * L) * row,
                  s + static_cast<size_t>(b * T + chunk_index(rank, size, j) * L) * row, static_cast<size_t>(L) * row);
  return out;
}

Tensor cp_gather_sequences(const Tensor& local, comm::Communicator& cp) {
  TESSEL_CHECK(local.dim() == 2 && local.dtype() == DType::i64 && local.is_contiguous(),
               "context parallel: gathering sequences needs contiguous i64 [B, 2L] rows, got {}", local.str());
  const int64_t B = local.size(0), Tl = local.size(1), C = cp.size(), T = Tl * C;
  if (local.is_meta()) {  // the same collective, nothing to place
    cp.all_gather(nullptr, nullptr, B * Tl, DType::i64);
    return Tensor::empty({B, T}, DType::i64, Device::meta);
  }
  const DeviceAccessScope copies;  // ids to the host, gathered, and the whole sequences back
  std::vector<int64_t> all(static_cast<size_t>(C * B * Tl));
  cp.all_gather(local.data<int64_t>(), all.data(), B * Tl, DType::i64);
  Tensor out = Tensor::empty({B, T}, DType::i64);
  for (int64_t r = 0; r < C; ++r)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < Tl; ++t)
        out.data<int64_t>()[b * T + cp_global_position(t, T, int(r), int(C))] = all[size_t((r * B + b) * Tl + t)];
  return out;
}

// Calls fn(j, kc, shape) for every (local query chunk j, held key chunk kc) pair that attends, with
// the chunk-sized kernel shape (causal for the diagonal pair).
template <class Fn>
void for_each_pair(const Ring& r, int src, bool causal, Fn&& fn) {
  for (int j = 0; j < 2; ++j)
    for (int kc = 0; kc < 2; ++kc) {
      const PairMode mode = pair_mode(chunk_index(r.rank, r.size, j), chunk_index(src, r.size, kc), causal);
      if (mode == PairMode::skip) continue;
      kernels::AttentionShape s = r.chunk;
      s.causal = mode == PairMode::causal;
      fn(j, kc, s);
    }
}

template <class To>
void cp_attention_fwd(const kernels::AttentionShape& local, const float* q, int64_t ldq, const float* k, int64_t ldk,
                      const float* v, int64_t ldv, To* out, int64_t ldo, float* lse, comm::Communicator& cp) {
  const Ring r(local, cp);
  const DeviceAccessScope on_device;  // the ring's buffers are device tensors, used here by host code
  RingForwardBuffers buf(r, Device::cpu);
  const int64_t nq = r.nq, nout = r.nout, nlse = r.nlse;
  float* qc = buf.qc.data<float>();
  float* acc = buf.acc.data<float>();
  float* lse_acc = buf.lse_acc.data<float>();
  float* part = buf.part.data<float>();
  float* part_lse = buf.part_lse.data<float>();
  float* kv = buf.kv.data<float>();
  float* kv_next = buf.kv_next.data<float>();
  std::fill_n(acc, 2 * nout, 0.0f);
  std::fill_n(lse_acc, 2 * nlse, -std::numeric_limits<float>::infinity());
  for (int j = 0; j < 2; ++j) pack_chunk(r, q, ldq, r.qcols(), j, qc + j * nq);
  pack_kv(r, k, ldk, v, ldv, kv);

  for (int step = 0; step < r.size; ++step) {
    // At this step we hold the K/V of rank src; the next one is already on its way.
    const int src = (r.rank - step + r.size) % r.size;
    RingTransfer transfer;
    if (step + 1 < r.size) transfer.start(cp, r, kv, kv_next, kTagKv);
    for_each_pair(r, src, local.causal, [&](int j, int kc, const kernels::AttentionShape& s) {
      kernels::attention_fwd<float>(s, qc + j * nq, r.qcols(), kv + r.k_at(kc), r.kcols(), kv + r.v_at(kc), r.vcols(),
                                    part, r.ocols(), part_lse);
      merge_partial(r, part, part_lse, acc + j * nout, lse_acc + j * nlse);
    });
    transfer.wait();
    std::swap(kv, kv_next);
  }
  for (int j = 0; j < 2; ++j) {
    unpack_chunk(r, acc + j * nout, r.ocols(), j, out, ldo);
    unpack_lse(r, lse_acc + j * nlse, j, lse);
  }
}

template <class To>
void cp_attention_bwd(const kernels::AttentionShape& local, const float* q, int64_t ldq, const float* k, int64_t ldk,
                      const float* v, int64_t ldv, const To* out, int64_t ldo, const float* dout, int64_t lddo,
                      const float* lse, float* dq, int64_t lddq, float* dk, int64_t lddk, float* dv, int64_t lddv,
                      comm::Communicator& cp) {
  const Ring r(local, cp);
  const DeviceAccessScope on_device;  // the ring's buffers are device tensors, used here by host code
  RingBackwardBuffers buf(r, std::is_same_v<To, bf16> ? DType::bf16 : DType::f32, Device::cpu);
  const int64_t nq = r.nq, nout = r.nout, nlse = r.nlse;
  // This rank's query-side rows, per chunk. With the global out and lse, the kernel's backward over
  // one key chunk gives that chunk's exact share of dq and the exact dk, dv of those keys.
  float* qc = buf.qc.data<float>();
  float* doc = buf.doc.data<float>();
  float* lsec = buf.lsec.data<float>();
  float* dq_acc = buf.dq_acc.data<float>();
  To* oc = buf.oc.data<To>();
  std::fill_n(dq_acc, 2 * nq, 0.0f);
  for (int j = 0; j < 2; ++j) {
    pack_chunk(r, q, ldq, r.qcols(), j, qc + j * nq);
    pack_chunk(r, dout, lddo, r.ocols(), j, doc + j * nout);
    pack_chunk(r, out, ldo, r.ocols(), j, oc + j * nout);
    pack_lse(r, lse, j, lsec + j * nlse);
  }
  float* kv = buf.kv.data<float>();
  float* kv_next = buf.kv_next.data<float>();
  pack_kv(r, k, ldk, v, ldv, kv);
  // dK/dV blocks: dkv_acc collects this step's contributions, dkv_out is being sent on, dkv_in holds
  // the partial sum of the previous ranks for the block held now. Layout as the K/V block.
  float* dkv_acc = buf.dkv_acc.data<float>();
  float* dkv_out = buf.dkv_out.data<float>();
  float* dkv_in = buf.dkv_in.data<float>();
  float* dq_s = buf.dq_s.data<float>();
  float* dk_s = buf.dk_s.data<float>();
  float* dv_s = buf.dv_s.data<float>();
  RingTransfer dkv_transfer;

  for (int step = 0; step < r.size; ++step) {
    const int src = (r.rank - step + r.size) % r.size;
    RingTransfer kv_transfer;
    if (step + 1 < r.size) kv_transfer.start(cp, r, kv, kv_next, kTagKv);
    std::fill_n(dkv_acc, r.kv_block(), 0.0f);
    for_each_pair(r, src, local.causal, [&](int j, int kc, const kernels::AttentionShape& s) {
      kernels::attention_bwd<To>(s, qc + j * nq, r.qcols(), kv + r.k_at(kc), r.kcols(), kv + r.v_at(kc), r.vcols(),
                                 oc + j * nout, r.ocols(), doc + j * nout, r.ocols(), lsec + j * nlse, dq_s, r.qcols(),
                                 dk_s, r.kcols(), dv_s, r.vcols());
      add_into(dq_acc + j * nq, dq_s, r.nq);
      add_into(dkv_acc + r.k_at(kc), dk_s, r.nk);
      add_into(dkv_acc + r.v_at(kc), dv_s, r.nv);
    });
    if (step > 0) {  // the earlier ranks' share of this block's gradient has arrived meanwhile
      dkv_transfer.wait();
      add_into(dkv_acc, dkv_in, r.kv_block());
    }
    if (r.size > 1) {  // on to the next rank; after the last step the block goes home to its owner
      std::swap(dkv_acc, dkv_out);
      dkv_transfer.start(cp, r, dkv_out, dkv_in, kTagDkv);
    }
    kv_transfer.wait();
    std::swap(kv, kv_next);
  }
  dkv_transfer.wait();
  const float* dkv = r.size > 1 ? dkv_in : dkv_acc;  // this rank's own K/V gradient
  for (int j = 0; j < 2; ++j) {
    unpack_chunk(r, dq_acc + j * nq, r.qcols(), j, dq, lddq);
    unpack_chunk(r, dkv + r.k_at(j), r.kcols(), j, dk, lddk);
    unpack_chunk(r, dkv + r.v_at(j), r.vcols(), j, dv, lddv);
  }
}

namespace {

// FLOPs of the chunk pairs a ring attention computes over all its steps (forward).
double ring_forward_flops(const Ring& r, bool causal) {
  double f = 0;
  for (int step = 0; step < r.size; ++step)
    for_each_pair(r, (r.rank - step + r.size) % r.size, causal,
                  [&](int, int, const kernels::AttentionShape& s) { f += kernels::attention_forward_flops(s); });
  return f;
}

void check_ring_operands(const char* op, const kernels::AttentionShape& s, const Tensor& q, const Tensor& k,
                         const Tensor& v, const Tensor& out, const Tensor& lse) {
  const int64_t N = s.B * s.T, Dv = s.dv();
  TESSEL_CHECK(q.dim() == 2 && q.size(0) == N && q.size(1) == s.H * s.Dh && q.stride(1) == 1 && q.dtype() == DType::f32 &&
                   k.dim() == 2 && k.size(0) == N && k.size(1) == s.G * s.Dh && k.stride(1) == 1 &&
                   k.dtype() == DType::f32 && v.dim() == 2 && v.size(0) == N && v.size(1) == s.G * Dv &&
                   v.stride(1) == 1 && v.dtype() == DType::f32,
               "{}: q [{}, {}], k [{}, {}] and v [{}, {}] f32 with unit column stride, got {} {} {}", op, N,
               s.H * s.Dh, N, s.G * s.Dh, N, s.G * Dv, q.str(), k.str(), v.str());
  TESSEL_CHECK(out.shape() == Shape({N, s.H * Dv}) && out.is_contiguous() &&
                   (out.dtype() == DType::f32 || out.dtype() == DType::bf16) &&
                   lse.shape() == Shape({s.B, s.H, s.T}) && lse.dtype() == DType::f32 && lse.is_contiguous(),
               "{}: out [{}, {}] f32 or bf16 and lse [{}, {}, {}] f32, got {} and {}", op, N, s.H * Dv, s.B, s.H,
               s.T, out.str(), lse.str());
}

}  // namespace

void ring_attention_forward(const kernels::AttentionShape& local, const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& out, const Tensor& lse, comm::Communicator& cp) {
  const char* op = "ring_attention_fwd";
  check_ring_operands(op, local, q, k, v, out, lse);
  const Device device = kernels::common_device(op, {&q, &k, &v, &out, &lse});
  const Ring r(local, cp);
  kernels::record_op(op, {&q, &k, &v}, {&out, &lse}, ring_forward_flops(r, local.causal));
  if (device == Device::meta) {  // the K/V blocks' trip around the ring, with the cpu's buffers
    const RingForwardBuffers buffers(r, Device::meta);
    for (int step = 0; step + 1 < r.size; ++step) {
      RingTransfer transfer;
      transfer.start(cp, r, nullptr, nullptr, kTagKv);
      transfer.wait();
    }
    return;
  }
  // Its ring transfers run inside the kernel: timed (op log timing), the time includes them.
  kernels::run_cpu_kernel_now([&] {
    if (out.dtype() == DType::bf16)
      cp_attention_fwd(local, q.data<float>(), q.stride(0), k.data<float>(), k.stride(0), v.data<float>(), v.stride(0),
                       out.data<bf16>(), out.size(1), lse.data<float>(), cp);
    else
      cp_attention_fwd(local, q.data<float>(), q.stride(0), k.data<float>(), k.stride(0), v.data<float>(), v.stride(0),
                       out.data<float>(), out.size(1), lse.data<float>(), cp);
  });
}

void ring_attention_backward(const kernels::AttentionShape& local, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& dout, const Tensor& lse, const Tensor& dq,
                             const Tensor& dk, const Tensor& dv, comm::Communicator& cp) {
  const char* op = "ring_attention_bwd";
  check_ring_operands(op, local, q, k, v, out, lse);
  TESSEL_CHECK(dout.shape() == out.shape() && dout.dtype() == DType::f32 && dout.stride(1) == 1 &&
                   dq.shape() == q.shape() && dk.shape() == k.shape() && dv.shape() == v.shape() &&
                   dq.stride(1) == 1 && dk.stride(1) == 1 && dv.stride(1) == 1,
               "{}: dout like out f32, dq, dk, dv like q, k, v, got {} {} {} {}", op, dout.str(), dq.str(), dk.str(),
               dv.str());
  const Device device = kernels::common_device(op, {&q, &k, &v, &out, &dout, &lse, &dq, &dk, &dv});
  const Ring r(local, cp);
  kernels::record_op(op, {&q, &k, &v, &out, &dout, &lse}, {&dq, &dk, &dv}, 2.5 * ring_forward_flops(r, local.causal));
  if (device == Device::meta) {  // K/V around the ring, their gradients one step behind (as below)
    const RingBackwardBuffers buffers(r, out.dtype(), Device::meta);
    RingTransfer dkv_transfer;
    for (int step = 0; step < r.size; ++step) {
      RingTransfer kv_transfer;
      if (step + 1 < r.size) kv_transfer.start(cp, r, nullptr, nullptr, kTagKv);
      if (step > 0) dkv_transfer.wait();
      if (r.size > 1) dkv_transfer.start(cp, r, nullptr, nullptr, kTagDkv);
      kv_transfer.wait();
    }
    dkv_transfer.wait();
    return;
  }
  kernels::run_cpu_kernel_now([&] {
    if (out.dtype() == DType::bf16)
      cp_attention_bwd(local, q.data<float>(), q.stride(0), k.data<float>(), k.stride(0), v.data<float>(), v.stride(0),
                       out.data<bf16>(), out.size(1), dout.data<float>(), dout.stride(0), lse.data<float>(),
                       dq.data<float>(), dq.stride(0), dk.data<float>(), dk.stride(0), dv.data<float>(), dv.stride(0), cp);
    else
      cp_attention_bwd(local, q.data<float>(), q.stride(0), k.data<float>(), k.stride(0), v.data<float>(), v.stride(0),
                       out.data<float>(), out.size(1), dout.data<float>(), dout.stride(0), lse.data<float>(),
                       dq.data<float>(), dq.stride(0), dk.data<float>(), dk.stride(0), dv.data<float>(), dv.stride(0), cp);
  });
}

template void cp_attention_fwd<float>(const kernels::AttentionShape&, const float*, int64_t, const float*, int64_t,
                                      const float*, int64_t, float*, int64_t, float*, comm::Communicator&);
template void cp_attention_fwd<bf16>(const kernels::AttentionShape&, const float*, int64_t, const float*, int64_t,
                                     const float*, int64_t, bf16*, int64_t, float*, comm::Communicator&);
template void cp_attention_bwd<float>(const kernels::AttentionShape&, const float*, int64_t, const float*, int64_t,
                                      const float*, int64_t, const float*, int64_t, const float*, int64_t,
                                      const float*, float*, int64_t, float*, int64_t, float*, int64_t,
                                      comm::Communicator&);
template void cp_attention_bwd<bf16>(const kernels::AttentionShape&, const float*, int64_t, const float*, int64_t,
                                     const float*, int64_t, const bf16*, int64_t, const float*, int64_t, const float*,
                                     float*, int64_t, float*, int64_t, float*, int64_t, comm::Communicator&);

}  // namespace tessel::nn
