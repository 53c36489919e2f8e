#include "tessel/data/synthetic.h"

#include "tessel/core/rng.h"

namespace tessel::data {

SyntheticData::SyntheticData(Kind kind, uint64_t seed, int64_t vocab, int64_t seq_length)
    : kind_(kind), seed_(seed), V_(vocab), T_(seq_length) {}

SyntheticData::Kind SyntheticData::parse(const std::string& path) {
  if (path == "synthetic" || path == "synthetic:motifs") return Kind::motifs;
  if (path == "synthetic:uniform") return Kind::uniform;
  TESSEL_FAIL("data.path: '{}' is not supported yet (allowed: synthetic, synthetic:motifs, synthetic:uniform)", path);
}

Batch SyntheticData::batch(int64_t first_sample, int64_t batch_size) const {
  Batch b{Tensor::empty({batch_size, T_}, DType::i64), Tensor::empty({batch_size, T_}, DType::i64)};
  int64_t* tok = b.tokens.data<int64_t>();
  int64_t* tgt = b.targets.data<int64_t>();
  for (int64_t s = 0; s < batch_size; ++s) {
    const uint64_t stream = uint64_t(first_sample + s);
    auto draw = [&](uint64_t i) { return int64_t(philox_uniform(seed_, stream, i) * float(V_)) % V_; };
    const int64_t motif = 2 + draw(1u << 30) % 15;
    for (int64_t t = 0; t <= T_; ++t) {
      const int64_t v = kind_ == Kind::uniform ? draw(uint64_t(t)) : draw(uint64_t(t % motif));
      if (t < T_) tok[s * T_ + t] = v;
      if (t > 0) tgt[s * T_ + t - 1] = v;
    }
  }
  return b;
}

}  // namespace tessel::data
