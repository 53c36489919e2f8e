// Ring attention's buffers (nn/context_parallel.h) are device tensors: the cpu run accounts them in
// its allocator, and the meta run accounts the same bytes without computing, so a dry run's peak
// holds them. Expected bytes are the buffer inventory of the ring algorithm (Ring Attention,
// arXiv 2310.01889, as context_parallel.cpp runs it) through the allocator's block rule, computed
// here, not read back.
#include <gtest/gtest.h>

#include "tessel/comm/communicator.h"
#include "tessel/core/memory.h"
#include "tessel/core/tensor.h"
#include "tessel/nn/context_parallel.h"

namespace tessel {
namespace {

// B = 2 sequences of Tl = 8 local rows (two chunks of L = 4), H = 4 query heads over G = 2 kv heads of Dh = 8.
constexpr kernels::AttentionShape kShape{2, 8, 4, 2, 8, true, 0.35355339f};
constexpr int64_t kL = kShape.T / 2;
constexpr int64_t kQ = kShape.B * kL * kShape.H * kShape.Dh;   // floats of one q chunk
constexpr int64_t kKv = kShape.B * kL * kShape.G * kShape.Dh;  // floats of one k chunk
constexpr int64_t kLse = kShape.B * kShape.H * kL;             // floats of one lse chunk

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
  Operands(Device d, DType out_dtype) {
    const int64_t N = kShape.B * kShape.T, qc = kShape.H * kShape.Dh, kvc = kShape.G * kShape.Dh;
    q = Tensor::zeros({N, qc}, DType::f32, d);
    k = Tensor::zeros({N, kvc}, DType::f32, d);
    v = Tensor::zeros({N, kvc}, DType::f32, d);
    out = Tensor::zeros({N, qc}, out_dtype, d);
    lse = Tensor::zeros({kShape.B, kShape.H, kShape.T}, DType::f32, d);
    dout = Tensor::zeros({N, qc}, DType::f32, d);
    dq = Tensor::zeros({N, qc}, DType::f32, d);
    dk = Tensor::zeros({N, kvc}, DType::f32, d);
    dv = Tensor::zeros({N, kvc}, DType::f32, d);
  }
};

// The peaks of ring attention's forward and backward on one device, over a group of one rank (cpu:
// the local communicator; meta: a meta group of one). Sizes do not depend on the group's size.
std::pair<Peaks, Peaks> ring_peaks(Device d, DType out_dtype) {
  auto cp = d == Device::meta ? comm::make_meta_communicator(0, 1) : comm::make_local_communicator();
  const Operands x(d, out_dtype);
  Allocator& a = allocator(d);
  a.reset_peak();
  MemoryStats before = a.stats();
  nn::ring_attention_forward(kShape, x.q, x.k, x.v, x.out, x.lse, *cp);
  const Peaks fwd = peaks_since(a, before);
  a.reset_peak();
  before = a.stats();
  nn::ring_attention_backward(kShape, x.q, x.k, x.v, x.out, x.dout, x.lse, x.dq, x.dk, x.dv, *cp);
  return {fwd, peaks_since(a, before)};
}

class RingAttentionMemory : public ::testing::TestWithParam<DType> {};

TEST_P(RingAttentionMemory, ItsBuffersAreAccountedAndTheSameOnCpuAndMeta) {
  const DType out_dtype = GetParam();
  const auto [cpu_fwd, cpu_bwd] = ring_peaks(Device::cpu, out_dtype);
  const auto [meta_fwd, meta_bwd] = ring_peaks(Device::meta, out_dtype);

  // Forward: both q chunks and their accumulated out (2 x 2 chunks), the accumulated lse (2 chunks),
  // one pair's out and lse; in flight: the K/V block held and the one arriving (K and V of 2 chunks).
  const int64_t fwd_workspace = 2 * f32_block(2 * kQ) + f32_block(2 * kLse) + f32_block(kQ) + f32_block(kLse);
  const int64_t fwd_communication = 2 * f32_block(4 * kKv);
  EXPECT_EQ(cpu_fwd.workspace, fwd_workspace);
  EXPECT_EQ(cpu_fwd.communication, fwd_communication);
  EXPECT_EQ(meta_fwd.workspace, fwd_workspace);
  EXPECT_EQ(meta_fwd.communication, fwd_communication);

  // Backward: q and dout chunks and the dq sum (3 x 2 chunks), out's chunks in out's dtype, the lse
  // chunks, one pair's dq, dk, dv; in flight: two K/V blocks and three dK/dV blocks.
  const int64_t out_chunks = out_dtype == DType::bf16 ? bf16_block(2 * kQ) : f32_block(2 * kQ);
  const int64_t bwd_workspace =
      3 * f32_block(2 * kQ) + out_chunks + f32_block(2 * kLse) + f32_block(kQ) + 2 * f32_block(kKv);
  const int64_t bwd_communication = 5 * f32_block(4 * kKv);
  EXPECT_EQ(cpu_bwd.workspace, bwd_workspace);
  EXPECT_EQ(cpu_bwd.communication, bwd_communication);
  EXPECT_EQ(meta_bwd.workspace, bwd_workspace);
  EXPECT_EQ(meta_bwd.communication, bwd_communication);
}

INSTANTIATE_TEST_SUITE_P(OutDtypes, RingAttentionMemory, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace tessel
