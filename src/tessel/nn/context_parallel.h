#pragma once
// Context parallelism (Megatron-LM): the sequence dimension of attention is split over a CP group,
// and keys/values travel around the group as a ring (Liu et al. 2023, "Ring Attention with Blockwise
// Transformers", arXiv 2310.01889), each step overlapping the next transfer with the current block.
//
// Load balancing of causal attention: a sequence of global length T is cut into 2C chunks of
// L = T / (2C) positions for a group of C ranks; rank i holds chunks i and 2C-1-i, in that order, so
// every rank has one early (cheap) and one late (expensive) chunk. Its local sequence has Tl = 2L rows:
//   local row t <  L  ->  global position i*L + t
//   local row t >= L  ->  global position (2C-1-i)*L + (t - L)
// Everything else in the layer (norms, MLP, projections, RoPE with cp_global_position) is per row,
// so only attention needs the other ranks.
#include <cstdint>

#include "tessel/comm/communicator.h"
#include "tessel/core/tensor.h"
#include "tessel/kernels/attention.h"

namespace tessel::nn {

// Global position of local row t (0 <= t < 2L) on cp rank `rank` of `size` for global length T
// (T divisible by 2 * size).
int64_t cp_global_position(int64_t t, int64_t T, int rank, int size);

// This rank's rows of a batch: [B, T, ...] -> [B, 2L, ...] (a contiguous copy; any dtype, e.g. i64
// tokens and targets [B, T] or f32 hidden states [B, T, d]). T divisible by 2 * size.
Tensor cp_local_slice(const Tensor& batch, int rank, int size);

// The inverse, over the group: every rank's rows [B, 2L] (i64, e.g. targets) -> the whole sequences
// [B, T] on every rank. Collective over cp (an all-gather).
Tensor cp_gather_sequences(const Tensor& local, comm::Communicator& cp);

// Ring attention, forward. `local` describes this rank's rows: local.T = Tl = 2L (both chunks),
// B, H query heads, G kv heads (GQA), Dh, Dv (value head width, 0: Dh), scale; local.causal = true
// masks by global position (false: every query sees every key). Layout as kernels::attention_fwd:
//   q   element (b, t, head, d) at q[(b*Tl + t)*ldq + head*Dh + d], head < H   (k likewise, head < G;
//       v with heads of Dv columns)
//   out [B*Tl rows, H*Dv] with row stride ldo (To = float or bf16, rounded once from fp32)
//   lse [B, H, Tl] f32: the log-sum-exp of the scaled scores over every key the query attends to,
//       across the whole group (what cp_attention_bwd needs).
// Collective over cp (C - 1 ring steps of this rank's K/V: 2 * B * L * G * (Dh + Dv) floats each).
template <class To>
void cp_attention_fwd(const kernels::AttentionShape& local, const float* q, int64_t ldq, const float* k, int64_t ldk,
                      const float* v, int64_t ldv, To* out, int64_t ldo, float* lse, comm::Communicator& cp);

// Ring attention, backward. out and lse are this rank's rows of cp_attention_fwd's results; dout
// [B*Tl, H*Dv] f32. Gradients of this rank's rows are written (not accumulated) into dq [B*Tl, H*Dh],
// dk [B*Tl, G*Dh] and dv [B*Tl, G*Dv]. K/V travel around the ring as in the forward; the dK/dV partial sums of
// each block travel one step behind them and arrive back at the block's owner after C steps.
template <class To>
void cp_attention_bwd(const kernels::AttentionShape& local, const float* q, int64_t ldq, const float* k, int64_t ldk,
                      const float* v, int64_t ldv, const To* out, int64_t ldo, const float* dout, int64_t lddo,
                      const float* lse, float* dq, int64_t lddq, float* dk, int64_t lddk, float* dv, int64_t lddv,
                      comm::Communicator& cp);

// The ring attention above as tensors on one device: q [B*Tl, H*Dh], k [B*Tl, G*Dh] and v
// [B*Tl, G*Dv] f32 rows strided (column slices of a fused qkv are fine), out [B*Tl, H*Dv] f32 or
// bf16, lse [B, H, Tl];
// backward: dout f32 like out, dq, dk, dv shaped like q, k, v. One op record per call
// ("ring_attention_fwd" / "_bwd", the FLOPs of every chunk pair it computes). On meta nothing is
// computed and the same ring transfers are issued, so the collectives are counted as on the cpu;
// the ring's buffers (packed chunks, partial results: workspace; the blocks in flight:
// communication) are tensors of the same sizes on both devices, so both account them.
void ring_attention_forward(const kernels::AttentionShape& local, const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& out, const Tensor& lse, comm::Communicator& cp);
void ring_attention_backward(const kernels::AttentionShape& local, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& dout, const Tensor& lse, const Tensor& dq,
                             const Tensor& dk, const Tensor& dv, comm::Communicator& cp);

}  // namespace tessel::nn
