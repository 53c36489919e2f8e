// The cpu kernels of the vocab-parallel cross-entropy (kernels/xent.h): one rank's column slice.
#include <algorithm>
#include <cmath>
#include <limits>

#include "tessel/kernels/cpu/elementwise.h"
#include "tessel/kernels/xent.h"

namespace tessel::kernels {

namespace {
bool target_here(int64_t t, int64_t vocab_begin, int64_t Vl) { return t >= 0 && t - vocab_begin >= 0 && t - vocab_begin < Vl; }
}  // namespace

void xent_local_max_and_target(int64_t N, int64_t Vl, const float* logits, const int64_t* targets,
                               int64_t vocab_begin, float* row_max, float* target_logit) {
  for (int64_t i = 0; i < N; ++i) {
    const float* x = logits + i * Vl;
    row_max[i] = max_of(Vl, x, -std::numeric_limits<float>::infinity());
    target_logit[i] = target_here(targets[i], vocab_begin, Vl) ? x[targets[i] - vocab_begin] : 0.0f;
  }
}

void xent_local_sum_exp(int64_t N, int64_t Vl, const float* logits, const float* row_max, float* sum_exp) {
  for (int64_t i = 0; i < N; ++i) {
    float s = 0;
    for (int64_t j = 0; j < Vl; ++j) s += fast_exp(logits[i * Vl + j] - row_max[i]);
    sum_exp[i] = s;
  }
}

double xent_vocab_parallel_finish(int64_t N, int64_t Vl, const float* logits, const int64_t* targets,
                                  int64_t vocab_begin, const float* row_max, const float* sum_exp,
                                  const float* target_logit, float grad_scale, float* dlogits) {
  double total = 0;
  for (int64_t i = 0; i < N; ++i)
    if (targets[i] >= 0) total += double(std::log(sum_exp[i]) + row_max[i] - target_logit[i]);  // ignored rows: none
  if (!dlogits) return total;
  for (int64_t i = 0; i < N; ++i) {
    const float scale = targets[i] >= 0 ? grad_scale / sum_exp[i] : 0.0f;
    for (int64_t j = 0; j < Vl; ++j) dlogits[i * Vl + j] = fast_exp(logits[i * Vl + j] - row_max[i]) * scale;
    if (target_here(targets[i], vocab_begin, Vl)) dlogits[i * Vl + targets[i] - vocab_begin] -= grad_scale;
  }
  return total;
}

}  // namespace tessel::kernels
