#pragma once
// Scaled dot-product attention with grouped-query heads, computed tile by tile with an online softmax
// (FlashAttention-2, Dao 2023, arXiv 2307.08691): no T x T matrix is kept. Forward saves only the
// output and the per-row log-sum-exp; backward recomputes the probabilities tile by tile.
//
// Layout: element (b, t, head, d) of q lives at q[(b*T + t) * ldq + head*Dh + d]; k likewise with kv
// head g = head / (H / G); v, out and dout have heads of Dv columns (Dv = Dh unless set: multi-latent
// attention's values are narrower than its queries and keys); out and dout use H heads, dk/dv use G
// heads. lse is [B, H, T].
#include <cstdint>

#include "tessel/core/tensor.h"

namespace tessel::kernels {

struct AttentionShape {
  int64_t B, T, H, G, Dh;
  bool causal;
  float scale;     // usually 1/sqrt(Dh)
  int64_t Dv = 0;  // columns per value head; 0: Dh
  int64_t dv() const { return Dv > 0 ? Dv : Dh; }
};

// The family's dispatch point (kernels/attention.cpp), as tensors on one device. q [B*T, H*Dh], k
// [B*T, G*Dh] and v [B*T, G*Dv] f32, rows strided (column slices of one fused qkv are fine); out
// [B*T, H*Dv] f32 or bf16; lse [B, H, T] f32. Backward: dout f32 like out; dq, dk, dv shaped like q,
// k, v.
void attention_forward(const AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                       const Tensor& lse);
void attention_backward(const AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& dout, const Tensor& lse, const Tensor& dq, const Tensor& dk, const Tensor& dv);
// FLOPs of one forward: QK^T (Dh) and PV (Dv) over the (causal: lower) triangle.
double attention_forward_flops(const AttentionShape& s);

// Incremental decoding of one sequence against its KV cache (nn::KVCache): n new rows at positions
// pos0 .. pos0 + n - 1. kv_cache_append copies their keys and values, the column slices k and v
// [n, G*Dh] (of the fused qkv), into rows pos0.. of k_cache and v_cache [T, G*Dh] f32.
// attention_decode: out [n, H*Dh] f32 = softmax(q k^T * scale) v for each new row over the cache's
// rows 0 .. its own position (causal), q [n, H*Dh] with strided rows. Exact softmax, one row at a
// time (a decode step has few rows; the training kernels' tiles would be empty).
void kv_cache_append(const Tensor& k, const Tensor& v, int64_t pos0, const Tensor& k_cache, const Tensor& v_cache);
void attention_decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t pos0, int64_t heads,
                      int64_t groups, float scale, const Tensor& out);

// The cpu kernels (kernels/cpu/attention.cpp) on raw arrays.

void attention_decode_rows(int64_t n, int64_t H, int64_t G, int64_t Dh, int64_t pos0, float scale, const float* q,
                           int64_t ldq, const float* k_cache, const float* v_cache, float* out);

template <class To>
void attention_fwd(const AttentionShape& s, const float* q, int64_t ldq, const float* k, int64_t ldk, const float* v,
                   int64_t ldv, To* out, int64_t ldo, float* lse);

// Gradients are written (not accumulated) into dq, dk, dv.
template <class To>
void attention_bwd(const AttentionShape& s, const float* q, int64_t ldq, const float* k, int64_t ldk, const float* v,
                   int64_t ldv, const To* out, int64_t ldo, const float* dout, int64_t lddo, const float* lse,
                   float* dq, int64_t lddq, float* dk, int64_t lddk, float* dv, int64_t lddv);

}  // namespace tessel::kernels
