#pragma once
// Token embedding lookup (plus learned absolute positions for GPT-2) and its backward.
// Rows are tokens of [B, T] flattened; row n has position n % T.
#include <cstdint>

namespace tessel::kernels {

// out[n] = W[tok[n]] (+ pos[n % T]). Token ids are checked against V.
void embedding_fwd(int64_t N, int64_t D, int64_t V, const int64_t* tok, const float* W, const float* pos, int64_t T,
                   float* out);
// dW[tok[n]] += dout[n]; dpos[n % T] += dout[n] (dpos may be null).
void embedding_bwd(int64_t N, int64_t D, const int64_t* tok, const float* dout, float* dW, float* dpos, int64_t T);

}  // namespace tessel::kernels
