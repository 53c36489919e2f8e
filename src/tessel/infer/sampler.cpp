#include "tessel/infer/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "tessel/core/check.h"
#include "tessel/core/rng.h"

namespace tessel::infer {

void SamplingOptions::validate() const {
  TESSEL_CHECK(std::isfinite(temperature) && temperature >= 0,
               "--temperature must be a finite number >= 0 (0 is greedy), got {}", temperature);
  TESSEL_CHECK(top_k >= 0, "--top-k must be >= 0 (0 keeps all tokens), got {}", top_k);
  TESSEL_CHECK(top_p > 0 && top_p <= 1, "--top-p must be in (0, 1], got {}", top_p);
}

// A diverged model's logits (NaN, +inf, or all -inf) rank no token; NaN would also break std::sort's
// ordering. Refused naming the step and the first offending id.
void check_finite(const float* logits, int64_t vocab, int64_t step) {
  TESSEL_CHECK(vocab > 0, "no logits to sample from at step {}", step);
  bool any_finite = false;
  for (int64_t i = 0; i < vocab; ++i) {
    TESSEL_CHECK(!std::isnan(logits[i]), "logits contain NaN at step {} (token id {})", step, i);
    TESSEL_CHECK(!(std::isinf(logits[i]) && logits[i] > 0), "logits contain +inf at step {} (token id {})", step, i);
    any_finite = any_finite || std::isfinite(logits[i]);
  }
  TESSEL_CHECK(any_finite, "logits are all -inf at step {}", step);
}

int64_t sample_token(const float* logits, int64_t vocab, const SamplingOptions& o, int64_t step) {
  check_finite(logits, vocab, step);
  if (o.temperature == 0) return int64_t(std::max_element(logits, logits + vocab) - logits);
  std::vector<int64_t> idx(static_cast<size_t>(vocab));
  std::iota(idx.begin(), idx.end(), 0);
  // Highest logit first; ties broken by token id so the order is deterministic.
  std::sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  int64_t keep = o.top_k > 0 ? std::min(o.top_k, vocab) : vocab;
  std::vector<double> p(static_cast<size_t>(keep));
  const double mx = logits[idx[0]];
  double sum = 0;
  for (int64_t i = 0; i < keep; ++i) sum += (p[size_t(i)] = std::exp((logits[idx[size_t(i)]] - mx) / o.temperature));
  if (o.top_p < 1) {
    double cum = 0;
    int64_t n = 0;
    while (n < keep && cum < o.top_p * sum) cum += p[size_t(n++)];
    keep = std::max<int64_t>(1, n);
    sum = cum;
  }
  const double u = double(philox_uniform(o.seed, stream_id("sampling"), uint64_t(step))) * sum;
  double acc = 0;
  for (int64_t i = 0; i < keep; ++i) {
    acc += p[size_t(i)];
    if (u < acc) return idx[size_t(i)];
  }
  return idx[size_t(keep - 1)];
}

}  // namespace tessel::infer
