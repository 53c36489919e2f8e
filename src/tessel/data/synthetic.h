#pragma once
// Generated token streams for benchmarks and the demo (no dataset needed):
//   uniform: i.i.d. tokens (benchmark input; the loss cannot fall below ln V)
//   markov:  a fixed random successor per token (a permutation keyed by the seed), followed with
//            probability 0.9, else a uniform token. A model learns the table quickly; the loss floor
//            is about 0.1 ln V + H(0.9) (~0.95 nats for V = 512), far below ln V.
//   motifs:  each sample repeats a random motif of 2..8 tokens (learning to copy takes longer).
// Sample i is a pure function of (seed, i), drawn from Philox.
#include <cstdint>
#include <string>
#include <vector>

#include "tessel/core/tensor.h"
#include "tessel/data/batch.h"

namespace tessel::data {

class SyntheticData {
 public:
  enum class Kind { uniform, markov, motifs };
  SyntheticData(Kind kind, uint64_t seed, int64_t vocab, int64_t seq_length);
  Batch batch(int64_t first_sample, int64_t batch_size) const;
  static Kind parse(const std::string& path);  // "synthetic[:markov]" / "synthetic:motifs" / "synthetic:uniform"

 private:
  Kind kind_;
  uint64_t seed_;
  int64_t V_, T_;
  std::vector<int64_t> successor_;  // markov: the successor of each token
};

}  // namespace tessel::data
