#pragma once
// Vocabulary-parallel embedding and cross-entropy (Megatron-LM): rank r of a tensor-parallel group
// of n holds vocabulary rows [r V/n, (r+1) V/n) of the embedding / output head, so the full-vocabulary
// logits are never gathered.
#include "tessel/comm/communicator.h"
#include "tessel/core/tensor.h"

namespace tessel::nn {

// logits [N, V/n] f32 of this rank's vocabulary slice starting at vocab_begin; targets [N] global
// ids. Returns the summed loss over rows (same on every rank) and writes
// dlogits = (softmax - onehot) * grad_scale for this slice (f32, may be logits; undefined: none). Three all-reduces of
// N floats: the row max, the sum of exponentials, the target's logit. Negative targets are ignored
// rows; a target at or past the vocabulary (slice size x group size) is an error.
double vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                                    float grad_scale, const Tensor& dlogits, comm::Communicator& tp);

// out [N, d] = rows of the full embedding for tokens [N] (global ids), from this rank's slice
// weight [V/n, d] starting at vocab_begin: rows outside the slice contribute zeros, then all-reduce.
// Token ids outside [0, V) are an error.
void vocab_parallel_embedding(const Tensor& tokens, const Tensor& weight, int64_t vocab_begin, Tensor& out,
                              comm::Communicator& tp);
// The same before the all-reduce: [N, d], zero rows for tokens outside this rank's slice. It cannot
// tell an id past the vocabulary from another rank's: callers check the ids (nn::Embedding does).
Tensor vocab_parallel_embedding_partial(const Tensor& tokens, const Tensor& weight, int64_t vocab_begin);
// dweight[t - vocab_begin] += dout[i] for tokens t inside this rank's slice.
void vocab_parallel_embedding_backward(const Tensor& tokens, const Tensor& dout, int64_t vocab_begin, Tensor& dweight);

}  // namespace tessel::nn
