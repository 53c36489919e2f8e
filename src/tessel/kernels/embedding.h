#pragma once
// Token embedding lookup (plus learned absolute positions for GPT-2) and its backward.
// Rows are tokens of [B, T] flattened; row n has position n % T.
#include <cstdint>

#include "tessel/core/tensor.h"

namespace tessel::kernels {

// The family's dispatch point (kernels/embedding.cpp), as tensors on one device: tokens i64 (any
// shape, N elements), W [V, D] f32 (forward: f32 or bf16, the table's compute copy when
// precision.fp32_embedding is off; rows are widened to f32), pos [>= T, D] f32 or undefined (row n
// adds pos[n % T]), out and dout [N, D] f32; backward accumulates into dW (f32) and dpos
// (undefined: no positions).
void embedding_forward(const Tensor& tokens, const Tensor& W, const Tensor& pos, int64_t T, const Tensor& out);
void embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dW, const Tensor& dpos, int64_t T);

// Refuses, naming `what` (e.g. "token id") and `op`, an id outside [0, limit); negative ids pass
// when allow_negative (ignored rows). On meta there are no ids to check.
void check_ids(const Tensor& ids, int64_t limit, bool allow_negative, const char* what, const char* op);
// Vocabulary-parallel lookup from this rank's slice W [Vl, D] of rows [vocab_begin, vocab_begin + Vl):
// out [N, D] = W[tok - vocab_begin] for ids in the slice, zero rows for the others; backward
// accumulates dW[tok - vocab_begin] += dout[n] for ids in the slice. W f32 or bf16 (forward), dW f32.
void embedding_forward_slice(const Tensor& tokens, const Tensor& W, int64_t vocab_begin, const Tensor& out);
void embedding_backward_slice(const Tensor& tokens, const Tensor& dout, int64_t vocab_begin, const Tensor& dW);
// out [N, D] += table[index[n]] for every row n (index i64 [N]): learned positions when a row's
// position is not n % T (sequence and context parallelism). Its backward is embedding_backward.
void add_gathered_rows(const Tensor& index, const Tensor& table, const Tensor& out);

// Token ids shifted left along each sequence: out [B, T] = ids [B, T] with out[b, i] = ids[b, i + by]
// for i + by < T, `fill` past the end (multi-token prediction's inputs and targets).
void shift_tokens(const Tensor& ids, int64_t by, int64_t fill, const Tensor& out);
// The number of ids >= 0 (rows that count in a loss), copied to the host; on meta there is no
// value: 0.
int64_t count_nonnegative(const Tensor& ids);

// The cpu kernels (kernels/cpu/embedding.cpp) on raw arrays.
// out[n] = W[tok[n]] (+ pos[n % T]). Token ids are checked against V.
void embedding_fwd(int64_t N, int64_t D, int64_t V, const int64_t* tok, const float* W, const float* pos, int64_t T,
                   float* out);
void embedding_fwd(int64_t N, int64_t D, int64_t V, const int64_t* tok, const bf16* W, const float* pos, int64_t T,
                   float* out);
// dW[tok[n]] += dout[n]; dpos[n % T] += dout[n] (dpos may be null).
void embedding_bwd(int64_t N, int64_t D, const int64_t* tok, const float* dout, float* dW, float* dpos, int64_t T);
void embedding_fwd_slice(int64_t N, int64_t D, int64_t Vl, const int64_t* tok, const float* W, int64_t vocab_begin,
                         float* out);
void embedding_fwd_slice(int64_t N, int64_t D, int64_t Vl, const int64_t* tok, const bf16* W, int64_t vocab_begin,
                         float* out);
void embedding_bwd_slice(int64_t N, int64_t D, int64_t Vl, const int64_t* tok, const float* dout, int64_t vocab_begin,
                         float* dW);
void add_gathered_rows(int64_t N, int64_t D, const int64_t* index, const float* table, float* out);

}  // namespace tessel::kernels
