#pragma once
// Generated token streams for benchmarks and the demo (no dataset needed):
//   uniform: i.i.d. tokens (benchmark input; the loss cannot fall below ln V)
//   motifs:  each sample repeats a random motif of 2..16 tokens, so a model can learn to copy it and
//            the loss falls well below ln V within a few hundred steps.
// Sample i is a pure function of (seed, i), drawn from Philox.
#include <cstdint>
#include <string>

#include "tessel/core/tensor.h"

namespace tessel::data {

struct Batch {
  Tensor tokens;   // [B, T] i64
  Tensor targets;  // [B, T] i64, tokens shifted by one
};

class SyntheticData {
 public:
  enum class Kind { uniform, motifs };
  SyntheticData(Kind kind, uint64_t seed, int64_t vocab, int64_t seq_length);
  Batch batch(int64_t first_sample, int64_t batch_size) const;
  static Kind parse(const std::string& path);  // "synthetic" / "synthetic:motifs" / "synthetic:uniform"

 private:
  Kind kind_;
  uint64_t seed_;
  int64_t V_, T_;
};

}  // namespace tessel::data
