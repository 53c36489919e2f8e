// Ring attention's buffers (nn/context_parallel.h) are device tensors: the cpu run accounts them in
// its allocator, and the meta run accounts the same bytes without computing, so a dry run's peak
// holds them. Expected bytes are the buffer inventory of the ring algorithm (Ring Attention,
// arXiv 2310.01889, as context_parallel.cpp runs it) through the allocator's block rule, computed
// here, not read back.
#include <gtest/gtest.h>

#include <tuple>

#include "tessel/comm/communicator.h"
#include "tessel/core/memory.h"
#include "tessel/core/tensor.h"
#include "tessel/nn/context_parallel.h"

namespace tessel {
namespace {

// B = 2 sequences of Tl = 8 local rows (two chunks of L = 4), H = 4 query heads over G = 2 kv heads of
// Dh = 8; values of Dh columns, or of 4 (multi-latent attention's narrower value heads).
constexpr kernels::AttentionShape kShape{2, 8, 4, 2, 8, true, 0.35355339f};
constexpr int64_t kL = kShape.T / 2;
constexpr int64_t kLse = kShape.B * kShape.H * kL;  // floats of one lse chunk

kernels::AttentionShape shape_with(int64_t Dv) {
  kernels::AttentionShape s = kShape;
  s.Dv = Dv;
  return s;
}
// Floats of one chunk of q, out (and dout), k and v.
struct ChunkFloats {
  int64_t q, out, k, v;
  explicit ChunkFloats(const kernels::AttentionShape& s)
      : q(s.B * kL * s.H * s.Dh), out(s.B * kL * s.H * s.dv()), k(s.B * kL * s.G * s.Dh), v(s.B * kL * s.G * s.dv()) {}
};

int64_t f32_block(int64_t floats) { return Allocator::accounted_bytes(size_t(floats) * 4); }
int64_t bf16_block(int64_t values) { return Allocator::accounted_bytes(size_t(values) * 2); }

struct Peaks {
  int64_t workspace, communication;
};

Peaks peaks_since(Allocator& a, const MemoryStats& before) {
  const MemoryStats after = a.stats();
  return {after.peak_of(MemoryCategory::workspace) - before.of(MemoryCategory::workspace),
          after.peak_of(MemoryCategory::communication) - before.of(MemoryCategory::communication)};
}

struct Operands {
  Tensor q, k, v, out, lse, dout, dq, dk, dv;
  Operands(const kernels::AttentionShape& s, Device d, DType out_dtype) {
    const int64_t N = s.B * s.T, qc = s.H * s.Dh, kc = s.G * s.Dh, oc = s.H * s.dv(), vc = s.G * s.dv();
    q = Tensor::zeros({N, qc}, DType::f32, d);
    k = Tensor::zeros({N, kc}, DType::f32, d);
    v = Tensor::zeros({N, vc}, DType::f32, d);
    out = Tensor::zeros({N, oc}, out_dtype, d);
    lse = Tensor::zeros({s.B, s.H, s.T}, DType::f32, d);
    dout = Tensor::zeros({N, oc}, DType::f32, d);
    dq = Tensor::zeros({N, qc}, DType::f32, d);
    dk = Tensor::zeros({N, kc}, DType::f32, d);
    dv = Tensor::zeros({N, vc}, DType::f32, d);
  }
};

// The peaks of ring attention's forward and backward on one device, over a group of one rank (cpu:
// the local communicator; meta: a meta group of one). Sizes do not depend on the group's size.
std::pair<Peaks, Peaks> ring_peaks(const kernels::AttentionShape& s, Device d, DType out_dtype) {
  auto cp = d == Device::meta ? comm::make_meta_communicator(0, 1) : comm::make_local_communicator();
  const Operands x(s, d, out_dtype);
  Allocator& a = allocator(d);
  a.reset_peak();
  MemoryStats before = a.stats();
  nn::ring_attention_forward(s, x.q, x.k, x.v, x.out, x.lse, *cp);
  const Peaks fwd = peaks_since(a, before);
  a.reset_peak();
  before = a.stats();
  nn::ring_attention_backward(s, x.q, x.k, x.v, x.out, x.dout, x.lse, x.dq, x.dk, x.dv, *cp);
  return {fwd, peaks_since(a, before)};
}

// (out dtype, value head width: 0 = Dh)
class RingAttentionMemory : public ::testing::TestWithParam<std::tuple<DType, int64_t>> {};

TEST_P(RingAttentionMemory, ItsBuffersAreAccountedAndTheSameOnCpuAndMeta) {
  const auto [out_dtype, Dv] = GetParam();
  const kernels::AttentionShape s = shape_with(Dv);
  const ChunkFloats n(s);
  const auto [cpu_fwd, cpu_bwd] = ring_peaks(s, Device::cpu, out_dtype);
  const auto [meta_fwd, meta_bwd] = ring_peaks(s, Device::meta, out_dtype);

  // Forward: both q chunks and their accumulated out (2 x 2 chunks), the accumulated lse (2 chunks),
  // one pair's out and lse; in flight: the K/V block held and the one arriving (K and V of 2 chunks).
  const int64_t fwd_workspace =
      f32_block(2 * n.q) + f32_block(2 * n.out) + f32_block(2 * kLse) + f32_block(n.out) + f32_block(kLse);
  const int64_t kv_block = 2 * n.k + 2 * n.v;
  const int64_t fwd_communication = 2 * f32_block(kv_block);
  EXPECT_EQ(cpu_fwd.workspace, fwd_workspace);
  EXPECT_EQ(cpu_fwd.communication, fwd_communication);
  EXPECT_EQ(meta_fwd.workspace, fwd_workspace);
  EXPECT_EQ(meta_fwd.communication, fwd_communication);

  // Backward: q and dout chunks and the dq sum (3 x 2 chunks), out's chunks in out's dtype, the lse
  // chunks, one pair's dq, dk, dv; in flight: two K/V blocks and three dK/dV blocks.
  const int64_t out_chunks = out_dtype == DType::bf16 ? bf16_block(2 * n.out) : f32_block(2 * n.out);
  const int64_t bwd_workspace = 2 * f32_block(2 * n.q) + f32_block(2 * n.out) + out_chunks + f32_block(2 * kLse) +
                                f32_block(n.q) + f32_block(n.k) + f32_block(n.v);
  const int64_t bwd_communication = 5 * f32_block(kv_block);
  EXPECT_EQ(cpu_bwd.workspace, bwd_workspace);
  EXPECT_EQ(cpu_bwd.communication, bwd_communication);
  EXPECT_EQ(meta_bwd.workspace, bwd_workspace);
  EXPECT_EQ(meta_bwd.communication, bwd_communication);
}

INSTANTIATE_TEST_SUITE_P(OutDtypesAndValueWidths, RingAttentionMemory,
                         ::testing::Combine(::testing::Values(DType::f32, DType::bf16), ::testing::Values<int64_t>(0, 4)),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_Dv" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace tessel
