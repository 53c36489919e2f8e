#include "tessel/kernels/xent.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tessel/core/check.h"
#include "tessel/kernels/cpu/elementwise.h"

namespace tessel::kernels {

template <class Tg>
double softmax_xent(int64_t N, int64_t V, const float* logits, const int64_t* targets, float grad_scale, Tg* dlogits,
                    float* row_loss) {
  for (int64_t i = 0; i < N; ++i)
    TESSEL_CHECK(targets[i] < V, "cross-entropy: target {} at row {} is outside the vocabulary [0, {})", targets[i],
                 i, V);
  // Per-row losses summed in row order afterwards: deterministic whatever the thread timing.
  std::vector<float> losses(static_cast<size_t>(N));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = logits + i * V;
    const int64_t t = targets[i];
    const float mx = max_of(V, x, -std::numeric_limits<float>::infinity());
    const float xt = t >= 0 ? x[t] : 0.0f;  // read before an aliased write overwrites it
    float sum = 0.0f;
    if (dlogits) {
      // exp(x - max) goes straight into dlogits (fp32) or a row buffer, then is scaled in place.
      Tg* g = dlogits + i * V;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < V; ++j) {
        const float e = fast_exp(x[j] - mx);
        store_as(g + j, e);
        sum += e;
      }
      const float scale = t >= 0 ? grad_scale / sum : 0.0f;
#pragma omp simd
      for (int64_t j = 0; j < V; ++j) store_as(g + j, to_f32(g[j]) * scale);
      if (t >= 0) store_as(g + t, fast_exp(xt - mx) * scale - grad_scale);
    } else {
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < V; ++j) sum += fast_exp(x[j] - mx);
    }
    const float loss = t >= 0 ? std::log(sum) + mx - xt : 0.0f;
    losses[size_t(i)] = loss;
  }
  double total = 0.0;
  for (int64_t i = 0; i < N; ++i) {
    total += double(losses[size_t(i)]);
    if (row_loss) row_loss[i] = losses[size_t(i)];
  }
  return total;
}

template double softmax_xent<float>(int64_t, int64_t, const float*, const int64_t*, float, float*, float*);
template double softmax_xent<bf16>(int64_t, int64_t, const float*, const int64_t*, float, bf16*, float*);

}  // namespace tessel::kernels
