#include "tessel/train/data_setup.h"

#include "tessel/data/tokenizer.h"

namespace tessel::train {

int64_t eval_samples(const Config& cfg) {
  if (cfg.train.eval_interval <= 0 || cfg.train.eval_iters <= 0) return 0;
  return cfg.train.eval_iters * cfg.train.global_batch_size;
}

RunData make_run_data(const Config& cfg) {
  const auto& m = cfg.model;
  const uint64_t seed = uint64_t(cfg.train.seed);
  RunData r;
  if (cfg.data.path.rfind("synthetic", 0) == 0) {
    const auto kind = data::SyntheticData::parse(cfg.data.path);
    auto train = std::make_shared<data::SyntheticData>(kind, seed, m.vocab_size, m.seq_length);
    auto valid = std::make_shared<data::SyntheticData>(kind, seed + 1, m.vocab_size, m.seq_length);
    r.train = [train](int64_t f, int64_t n) { return train->batch(f, n); };
    if (eval_samples(cfg) > 0) r.valid = [valid](int64_t f, int64_t n) { return valid->batch(f, n); };
    r.description = "generated (" + cfg.data.path + ")";
    return r;
  }
  const data::DataBlend blend = data::parse_data_path(cfg.data.path);
  if (!cfg.data.tokenizer.empty()) {
    const data::Tokenizer tok(cfg.data.tokenizer);
    const int64_t v = tok.vocab_size(), padded = (v + 127) / 128 * 128;
    TESSEL_CHECK(m.vocab_size >= v && m.vocab_size <= padded,
                 "model.vocab_size {} disagrees with the tokenizer '{}' ({} tokens): set model.vocab_size to {} (or "
                 "up to {}, padded to a multiple of 128)",
                 m.vocab_size, cfg.data.tokenizer, v, v, padded);
  } else {
    for (const auto& p : blend.prefixes) {
      const int64_t mx = data::IndexedDataset(p).max_token();
      TESSEL_CHECK(mx < m.vocab_size, "dataset '{}' holds token id {}, outside model.vocab_size {}", p, mx,
                   m.vocab_size);
    }
  }
  const int64_t train_samples = cfg.train.train_iters * cfg.train.global_batch_size;
  auto train = std::shared_ptr<const data::SampleSource>(
      data::build_split(blend, cfg.data.split, 0, m.seq_length, std::max<int64_t>(1, train_samples), seed));
  auto train_loader = std::make_shared<data::BatchLoader>(train, m.seq_length);
  r.train = [train_loader](int64_t f, int64_t n) { return train_loader->get(f, n); };
  if (eval_samples(cfg) > 0) {
    auto valid = std::shared_ptr<const data::SampleSource>(
        data::build_split(blend, cfg.data.split, 1, m.seq_length, eval_samples(cfg), seed));
    auto valid_loader = std::make_shared<data::BatchLoader>(valid, m.seq_length);
    r.valid = [valid_loader](int64_t f, int64_t n) { return valid_loader->get(f, n); };
  }
  r.description = cfg.data.path + " (split " + cfg.data.split + ")";
  return r;
}

}  // namespace tessel::train
