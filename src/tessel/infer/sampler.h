#pragma once
// Next-token selection from logits: greedy (temperature 0), or sampling at a temperature from the
// top-k tokens and/or the smallest set whose probability reaches top-p (nucleus sampling, Holtzman
// et al. 2019). Draws are Philox keyed by (seed, step): a seed reproduces a generation.
#include <cstdint>

namespace tessel::infer {

struct SamplingOptions {
  double temperature = 0.8;  // 0: greedy
  int64_t top_k = 0;         // 0: no limit
  double top_p = 1.0;        // 1: no limit
  uint64_t seed = 0;
  void validate() const;     // throws naming the bad option
};

// Picks one of ids [0, vocab): pass the tokenizer's vocabulary size to leave out a padded model's extra
// ids. Throws on NaN or +inf logits (or all -inf), naming the step.
int64_t sample_token(const float* logits, int64_t vocab, const SamplingOptions& o, int64_t step);

}  // namespace tessel::infer
