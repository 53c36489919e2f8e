#pragma once
// Token embedding lookup (plus learned absolute positions for GPT-2) and its backward.
// Rows are tokens of [B, T] flattened; row n has position n % T.
#include <cstdint>

#include "tessel/core/tensor.h"

namespace tessel::kernels {

// The family's dispatch point (kernels/embedding.cpp), as tensors on one device: tokens i64 (any
// shape, N elements), W [V, D] f32, pos [>= T, D] f32 or undefined (row n adds pos[n % T]), out and
// dout [N, D] f32; backward accumulates into dW and dpos (undefined: no positions).
void embedding_forward(const Tensor& tokens, const Tensor& W, const Tensor& pos, int64_t T, const Tensor& out);
void embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dW, const Tensor& dpos, int64_t T);

// The cpu kernels (kernels/cpu/embedding.cpp) on raw arrays.
// out[n] = W[tok[n]] (+ pos[n % T]). Token ids are checked against V.
void embedding_fwd(int64_t N, int64_t D, int64_t V, const int64_t* tok, const float* W, const float* pos, int64_t T,
                   float* out);
// dW[tok[n]] += dout[n]; dpos[n % T] += dout[n] (dpos may be null).
void embedding_bwd(int64_t N, int64_t D, const int64_t* tok, const float* dout, float* dW, float* dpos, int64_t T);

}  // namespace tessel::kernels
