#include "tessel/nn/vocab_parallel.h"

#include "tessel/kernels/embedding.h"
#include "tessel/kernels/xent.h"

namespace tessel::nn {

// Every rank holds an equal slice (nn::Model requires model.vocab_size divisible by the group), so
// the global vocabulary is the slice size times the group size.

double vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                                    float grad_scale, const Tensor& dlogits, comm::Communicator& tp) {
  const int64_t N = logits.size(0), Vl = logits.size(1);
  TESSEL_CHECK(targets.numel() == N, "vocab-parallel cross-entropy: {} targets for {} rows", targets.numel(), N);
  // A target past the vocabulary would otherwise count as a zero logit on every rank.
  kernels::check_ids(targets, Vl * tp.size(), true, "target", "vocab-parallel cross-entropy");
  const Device on = logits.device();
  const Tensor row_max = Tensor::empty({N}, DType::f32, on), target_logit = Tensor::empty({N}, DType::f32, on);
  const Tensor sum_exp = Tensor::empty({N}, DType::f32, on);
  kernels::xent_local_max_and_target(logits, targets, vocab_begin, row_max, target_logit);
  tp.all_reduce(row_max.device_ptr(), N, DType::f32, comm::ReduceOp::max);
  tp.all_reduce(target_logit.device_ptr(), N, DType::f32, comm::ReduceOp::sum);  // exactly one rank holds each target
  kernels::xent_local_sum_exp(logits, row_max, sum_exp);
  tp.all_reduce(sum_exp.device_ptr(), N, DType::f32, comm::ReduceOp::sum);
  return kernels::xent_vocab_parallel_finish(logits, targets, vocab_begin, row_max, sum_exp, target_logit, grad_scale,
                                             dlogits);
}

Tensor vocab_parallel_embedding_partial(const Tensor& tokens, const Tensor& weight, int64_t vocab_begin) {
  Tensor out = Tensor::empty({tokens.numel(), weight.size(1)}, DType::f32, weight.device());
  kernels::embedding_forward_slice(tokens, weight, vocab_begin, out);
  return out;
}

void vocab_parallel_embedding(const Tensor& tokens, const Tensor& weight, int64_t vocab_begin, Tensor& out,
                              comm::Communicator& tp) {
  kernels::check_ids(tokens, weight.size(0) * tp.size(), false, "token id", "vocab-parallel embedding");
  out = vocab_parallel_embedding_partial(tokens, weight, vocab_begin);
  tp.all_reduce(out.device_ptr(), out.numel(), DType::f32, comm::ReduceOp::sum);
}

void vocab_parallel_embedding_backward(const Tensor& tokens, const Tensor& dout, int64_t vocab_begin, Tensor& dweight) {
  kernels::embedding_backward_slice(tokens, dout, vocab_begin, dweight);
}

}  // namespace tessel::nn
