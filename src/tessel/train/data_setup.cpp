#include "tessel/train/data_setup.h"

#include "tessel/data/tokenizer.h"

namespace tessel::train {

namespace {

// iters x train.global_batch_size, refused when it overflows (the product sizes the sample index).
int64_t samples_of(int64_t iters, const char* iters_key, const Config& cfg) {
  int64_t n = 0;
  TESSEL_CHECK(!__builtin_mul_overflow(iters, cfg.train.global_batch_size, &n),
               "{} {} x train.global_batch_size {} samples are more than a 64-bit count holds", iters_key, iters,
               cfg.train.global_batch_size);
  return n;
}

}  // namespace

// model.vocab_size may pad the tokenizer's vocabulary (to a multiple of 128, for tensor-parallel
// splits and GEMM shapes); ids in the padding are rows no text maps to, so data holding them was
// made with another tokenizer and is refused. Without a tokenizer the real vocabulary is unknown
// and model.vocab_size is the bound.
data::VocabBound dataset_vocab_bound(const Config& cfg) {
  const auto& m = cfg.model;
  if (cfg.data.tokenizer.empty()) return {m.vocab_size, "model.vocab_size"};
  const data::Tokenizer tok(cfg.data.tokenizer);
  data::check_model_vocab(tok, m.vocab_size);  // the same rule as generate
  const int64_t v = tok.vocab_size();
  return {v, "the vocabulary of tokenizer '" + cfg.data.tokenizer + "'"};
}

int64_t eval_samples(const Config& cfg) {
  if (cfg.train.eval_interval <= 0 || cfg.train.eval_iters <= 0) return 0;
  return samples_of(cfg.train.eval_iters, "train.eval_iters", cfg);
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
  const data::VocabBound vocab = dataset_vocab_bound(cfg);
  if (cfg.data.tokenizer.empty()) {
    // Without a tokenizer nothing else vouches for the data: every id is read once before training
    // (an error now rather than mid-run). With one, ids are checked as batches are read.
    for (const auto& p : blend.prefixes) data::IndexedDataset(p, vocab).scan_token_ids();
  }
  const int64_t train_samples = samples_of(cfg.train.train_iters, "train.train_iters", cfg);
  auto train = std::shared_ptr<const data::SampleSource>(
      data::build_split(blend, cfg.data.split, 0, m.seq_length, std::max<int64_t>(1, train_samples), seed, vocab));
  auto train_loader = std::make_shared<data::BatchLoader>(train, m.seq_length);
  r.train = [train_loader](int64_t f, int64_t n) { return train_loader->get(f, n); };
  if (eval_samples(cfg) > 0) {
    auto valid = std::shared_ptr<const data::SampleSource>(
        data::build_split(blend, cfg.data.split, 1, m.seq_length, eval_samples(cfg), seed, vocab));
    auto valid_loader = std::make_shared<data::BatchLoader>(valid, m.seq_length);
    r.valid = [valid_loader](int64_t f, int64_t n) { return valid_loader->get(f, n); };
  }
  r.description = cfg.data.path + " (split " + cfg.data.split + ")";
  return r;
}

}  // namespace tessel::train
