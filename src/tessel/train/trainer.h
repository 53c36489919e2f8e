#pragma once
// Trainer: one optimizer step = gradient accumulation over the global batch's micro-batches, global
// grad-norm clipping, AdamW at the scheduled learning rate.
#include <memory>
#include <vector>

#include "tessel/comm/communicator.h"
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
  // dp: the data-parallel group (null or size 1: one replica). Each rank passes its own micro-batches;
  // gradients are summed across dp in buckets overlapping backward, so every replica takes the step
  // a single process would take on the whole global batch.
  explicit Trainer(const Config& cfg, comm::Communicator* dp = nullptr);
  nn::Model& model() { return *model_; }
  optim::AdamW& optimizer() { return *opt_; }
  // micro_batches.size() must be the configured accumulation count.
  StepResult step(const std::vector<data::Batch>& micro_batches, int64_t iter);

 private:
  Config cfg_;
  comm::Communicator* dp_ = nullptr;
  std::unique_ptr<nn::Model> model_;
  std::unique_ptr<optim::AdamW> opt_;
  optim::LrSchedule schedule_;
};

}  // namespace tessel::train
