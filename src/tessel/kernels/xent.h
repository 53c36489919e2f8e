#pragma once
// Softmax cross-entropy fused with its gradient: one sweep over each row of logits gives the loss
// and dlogits = (softmax(logits) - onehot(target)) * grad_scale. fp32 math throughout.
// Rows whose target is negative are ignored (no loss, zero gradient).
#include <cstdint>

#include "tessel/core/tensor.h"

namespace tessel::kernels {

// The family's dispatch points (kernels/xent.cpp), as tensors on one device.
//
// logits [N, V] f32, targets N i64 (checked against V on devices that hold values), dlogits
// undefined (forward only), f32 [N, V] (may be logits itself: written in place) or bf16 [N, V].
// Returns the loss summed over rows, copied to the host: on an asynchronous device this is a
// synchronisation. On meta there is no value: 0.
double cross_entropy(const Tensor& logits, const Tensor& targets, float grad_scale, const Tensor& dlogits);

// Cross-entropy over a vocabulary split by columns (Megatron's vocab-parallel loss): this rank holds
// logits [N, Vl] of vocabulary columns [vocab_begin, vocab_begin + Vl). The caller reduces across
// the group between the steps: row_max (max), target_logit and sum_exp (sum); all three are f32 [N].
//   1. xent_local_max_and_target: this slice's row maxima, and each row's target logit where the
//      target falls in this slice (0 elsewhere);
//   2. xent_local_sum_exp: sum_j exp(logits[i, j] - row_max[i]) over this slice;
//   3. xent_vocab_parallel_finish: the summed loss (copied to the host as above) and, when dlogits
//      (f32 [N, Vl], may be logits) is defined, this slice's gradient.
void xent_local_max_and_target(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                               const Tensor& row_max, const Tensor& target_logit);
void xent_local_sum_exp(const Tensor& logits, const Tensor& row_max, const Tensor& sum_exp);
double xent_vocab_parallel_finish(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                                  const Tensor& row_max, const Tensor& sum_exp, const Tensor& target_logit,
                                  float grad_scale, const Tensor& dlogits);

// The cpu kernels (kernels/cpu/xent.cpp) on raw arrays.

// logits [N, V] (f32, dense). Returns the summed loss over rows (double). dlogits may be null
// (forward only) and may alias logits when Tg is float. row_loss (optional) gets each row's loss.
template <class Tg>
double softmax_xent(int64_t N, int64_t V, const float* logits, const int64_t* targets, float grad_scale, Tg* dlogits,
                    float* row_loss = nullptr);

void xent_local_max_and_target(int64_t N, int64_t Vl, const float* logits, const int64_t* targets,
                               int64_t vocab_begin, float* row_max, float* target_logit);
void xent_local_sum_exp(int64_t N, int64_t Vl, const float* logits, const float* row_max, float* sum_exp);
double xent_vocab_parallel_finish(int64_t N, int64_t Vl, const float* logits, const int64_t* targets,
                                  int64_t vocab_begin, const float* row_max, const float* sum_exp,
                                  const float* target_logit, float grad_scale, float* dlogits);

}  // namespace tessel::kernels
