#pragma once
// Where a run's batches come from: generated streams (data.path: synthetic[:kind]) or indexed
// datasets (a prefix or a weighted blend) split into train / valid by data.split.
#include <functional>
#include <memory>
#include <string>

#include "tessel/data/gpt_dataset.h"
#include "tessel/train/config.h"

namespace tessel::train {

using BatchFn = std::function<data::Batch(int64_t first_sample, int64_t batch_size)>;

struct RunData {
  BatchFn train;
  BatchFn valid;  // empty when evaluation is off
  std::string description;
};

// Validates the data section against the model (tokenizer vocabulary vs model.vocab_size, token
// ids in range, enough documents in each split) and builds the sources.
RunData make_run_data(const Config& cfg);

// The token ids a run's datasets may hold: below the tokenizer's vocabulary (data.tokenizer, after
// checking it against model.vocab_size; ids in model.vocab_size's padding are refused) or below
// model.vocab_size (no tokenizer).
data::VocabBound dataset_vocab_bound(const Config& cfg);

// Samples the valid split needs: eval_iters batches per evaluation, evaluations every eval_interval.
int64_t eval_samples(const Config& cfg);

}  // namespace tessel::train
