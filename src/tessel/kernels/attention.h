#pragma once
// Scaled dot-product attention with grouped-query heads, computed tile by tile with an online softmax
// (FlashAttention-2, Dao 2023, arXiv 2307.08691): no T x T matrix is kept. Forward saves only the
// output and the per-row log-sum-exp; backward recomputes the probabilities tile by tile.
//
// Layout: element (b, t, head, d) of q lives at q[(b*T + t) * ldq + head*Dh + d]; k and v likewise with
// kv head g = head / (H / G); out and dout use H heads, dk/dv use G heads. lse is [B, H, T].
#include <cstdint>

namespace tessel::kernels {

struct AttentionShape {
  int64_t B, T, H, G, Dh;
  bool causal;
  float scale;  // usually 1/sqrt(Dh)
};

template <class To>
void attention_fwd(const AttentionShape& s, const float* q, int64_t ldq, const float* k, int64_t ldk, const float* v,
                   int64_t ldv, To* out, int64_t ldo, float* lse);

// Gradients are written (not accumulated) into dq, dk, dv.
template <class To>
void attention_bwd(const AttentionShape& s, const float* q, int64_t ldq, const float* k, int64_t ldk, const float* v,
                   int64_t ldv, const To* out, int64_t ldo, const float* dout, int64_t lddo, const float* lse,
                   float* dq, int64_t lddq, float* dk, int64_t lddk, float* dv, int64_t lddv);

}  // namespace tessel::kernels
