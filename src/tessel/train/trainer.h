#pragma once
// Trainer: one optimizer step = gradient accumulation over the global batch's micro-batches, global
// grad-norm clipping, AdamW at the scheduled learning rate.
#include <memory>
#include <vector>

#include "tessel/data/synthetic.h"
#include "tessel/nn/model.h"
#include "tessel/optim/adamw.h"
#include "tessel/optim/lr_schedule.h"
#include "tessel/train/config.h"

namespace tessel::train {

struct StepResult {
  double loss;       // mean over the global batch's tokens
  double grad_norm;  // before clipping
  double lr;
};

class Trainer {
 public:
  explicit Trainer(const Config& cfg);
  nn::Model& model() { return *model_; }
  optim::AdamW& optimizer() { return *opt_; }
  // micro_batches.size() must be the configured accumulation count.
  StepResult step(const std::vector<data::Batch>& micro_batches, int64_t iter);

 private:
  Config cfg_;
  std::unique_ptr<nn::Model> model_;
  std::unique_ptr<optim::AdamW> opt_;
  optim::LrSchedule schedule_;
};

}  // namespace tessel::train
