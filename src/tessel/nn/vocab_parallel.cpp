#include "tessel/nn/vocab_parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tessel/kernels/cpu/elementwise.h"

namespace tessel::nn {

namespace {

// Every rank holds an equal slice (nn::Model requires model.vocab_size divisible by the group), so
// the global vocabulary is the slice size times the group size.
void check_ids(const Tensor& ids, int64_t vocab, bool allow_ignored, const char* what, const char* op) {
  const int64_t* t = ids.data<int64_t>();
  for (int64_t i = 0; i < ids.numel(); ++i)
    TESSEL_CHECK(t[i] < vocab && (t[i] >= 0 || allow_ignored), "{}: {} {} at {} {} is outside the vocabulary [0, {})",
                 op, what, t[i], allow_ignored ? "row" : "position", i, vocab);
}

}  // namespace

double vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                                    float grad_scale, float* dlogits, comm::Communicator& tp) {
  const int64_t N = logits.size(0), Vl = logits.size(1);
  TESSEL_CHECK(targets.numel() == N, "vocab-parallel cross-entropy: {} targets for {} rows", targets.numel(), N);
  // A target past the vocabulary would otherwise count as a zero logit on every rank.
  check_ids(targets, Vl * tp.size(), true, "target", "vocab-parallel cross-entropy");
  const float* x = logits.data<float>();
  const int64_t* t = targets.data<int64_t>();
  std::vector<float> mx(static_cast<size_t>(N)), sum(static_cast<size_t>(N)), xt(static_cast<size_t>(N), 0.0f);
  for (int64_t i = 0; i < N; ++i) {
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < Vl; ++j) m = std::max(m, x[i * Vl + j]);
    mx[size_t(i)] = m;
    const int64_t local = t[i] - vocab_begin;
    if (t[i] >= 0 && local >= 0 && local < Vl) xt[size_t(i)] = x[i * Vl + local];
  }
  tp.all_reduce(mx.data(), N, DType::f32, comm::ReduceOp::max);
  tp.all_reduce(xt.data(), N, DType::f32, comm::ReduceOp::sum);  // exactly one rank holds each target
  for (int64_t i = 0; i < N; ++i) {
    float s = 0;
    for (int64_t j = 0; j < Vl; ++j) s += kernels::fast_exp(x[i * Vl + j] - mx[size_t(i)]);
    sum[size_t(i)] = s;
  }
  tp.all_reduce(sum.data(), N, DType::f32, comm::ReduceOp::sum);
  double total = 0;
  for (int64_t i = 0; i < N; ++i) {
    if (t[i] < 0) continue;  // ignored row
    total += double(std::log(sum[size_t(i)]) + mx[size_t(i)] - xt[size_t(i)]);
  }
  if (dlogits) {
    for (int64_t i = 0; i < N; ++i) {
      const float scale = t[i] >= 0 ? grad_scale / sum[size_t(i)] : 0.0f;
      for (int64_t j = 0; j < Vl; ++j) dlogits[i * Vl + j] = kernels::fast_exp(x[i * Vl + j] - mx[size_t(i)]) * scale;
      const int64_t local = t[i] - vocab_begin;
      if (t[i] >= 0 && local >= 0 && local < Vl) dlogits[i * Vl + local] -= grad_scale;
    }
  }
  return total;
}

Tensor vocab_parallel_embedding_partial(const Tensor& tokens, const Tensor& weight, int64_t vocab_begin) {
  const int64_t N = tokens.numel(), Vl = weight.size(0), D = weight.size(1);
  Tensor out = Tensor::zeros({N, D}, DType::f32);
  const int64_t* t = tokens.data<int64_t>();
  for (int64_t i = 0; i < N; ++i) {
    const int64_t local = t[i] - vocab_begin;
    if (local >= 0 && local < Vl) std::copy_n(weight.data<float>() + local * D, D, out.data<float>() + i * D);
  }
  return out;
}

void vocab_parallel_embedding(const Tensor& tokens, const Tensor& weight, int64_t vocab_begin, Tensor& out,
                              comm::Communicator& tp) {
  check_ids(tokens, weight.size(0) * tp.size(), false, "token id", "vocab-parallel embedding");
  out = vocab_parallel_embedding_partial(tokens, weight, vocab_begin);
  tp.all_reduce(out.raw(), out.numel(), DType::f32, comm::ReduceOp::sum);
}

void vocab_parallel_embedding_backward(const Tensor& tokens, const Tensor& dout, int64_t vocab_begin, Tensor& dweight) {
  const int64_t N = tokens.numel(), Vl = dweight.size(0), D = dweight.size(1);
  const int64_t* t = tokens.data<int64_t>();
  for (int64_t i = 0; i < N; ++i) {
    const int64_t local = t[i] - vocab_begin;
    if (local < 0 || local >= Vl) continue;
    float* w = dweight.data<float>() + local * D;
    const float* g = dout.data<float>() + i * D;
    for (int64_t j = 0; j < D; ++j) w[j] += g[j];
  }
}

}  // namespace tessel::nn
