#include "tessel/data/synthetic.h"

#include "tessel/core/rng.h"

namespace tessel::data {

SyntheticData::SyntheticData(Kind kind, uint64_t seed, int64_t vocab, int64_t seq_length)
    : kind_(kind), seed_(seed), V_(vocab), T_(seq_length), successor_(size_t(vocab)) {
  // Fisher-Yates with Philox draws: the successor table depends on the seed only.
  for (int64_t i = 0; i < V_; ++i) successor_[size_t(i)] = i;
  for (int64_t i = V_ - 1; i > 0; --i) {
    const int64_t j = int64_t(philox_uniform(seed_, ~0ull, uint64_t(i)) * float(i + 1)) % (i + 1);
    std::swap(successor_[size_t(i)], successor_[size_t(j)]);
  }
}

SyntheticData::Kind SyntheticData::parse(const std::string& path) {
  if (path == "synthetic" || path == "synthetic:markov") return Kind::markov;
  if (path == "synthetic:motifs") return Kind::motifs;
  if (path == "synthetic:uniform") return Kind::uniform;
  TESSEL_FAIL("data.path: '{}' is not supported yet (allowed: synthetic, synthetic:markov, synthetic:motifs, synthetic:uniform; datasets come with the data pipeline)", path);
}

Batch SyntheticData::batch(int64_t first_sample, int64_t batch_size) const {
  const DeviceAccessScope host_copy;  // token ids written into the batch's tensors: an upload
  Batch b{Tensor::empty({batch_size, T_}, DType::i64), Tensor::empty({batch_size, T_}, DType::i64)};
  int64_t* tok = b.tokens.data<int64_t>();
  int64_t* tgt = b.targets.data<int64_t>();
  for (int64_t s = 0; s < batch_size; ++s) {
    const uint64_t stream = uint64_t(first_sample + s);
    auto draw = [&](uint64_t i) { return int64_t(philox_uniform(seed_, stream, i) * float(V_)) % V_; };
    const int64_t motif = 2 + draw(1u << 30) % 7;
    int64_t prev = draw(1u << 29);
    for (int64_t t = 0; t <= T_; ++t) {
      int64_t v;
      if (kind_ == Kind::uniform) v = draw(uint64_t(t));
      else if (kind_ == Kind::motifs) v = draw(uint64_t(t % motif));
      else v = philox_uniform(seed_, stream, (1ull << 31) + uint64_t(t)) < 0.9f ? successor_[size_t(prev)] : draw(uint64_t(t));
      prev = v;
      if (t < T_) tok[s * T_ + t] = v;
      if (t > 0) tgt[s * T_ + t - 1] = v;
    }
  }
  return b;
}

}  // namespace tessel::data
