#pragma once
// Trainer: one optimizer step = gradient accumulation over the global batch's micro-batches, global
// grad-norm clipping, AdamW at the scheduled learning rate.
#include <memory>
#include <vector>

#include "tessel/ckpt/checkpoint.h"
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
  // tp: the tensor-parallel group (null or size 1: none); the model is split over it.
  explicit Trainer(const Config& cfg, comm::Communicator* dp = nullptr, comm::Communicator* tp = nullptr);
  nn::Model& model() { return *model_; }
  optim::AdamW& optimizer() { return *opt_; }
  // With parallel.use_distributed_optimizer (ZeRO-1) each rank keeps Adam state for a 1/dp shard:
  // gradients are reduce-scattered, the shard updated, and parameters all-gathered.
  // micro_batches.size() x dp must be the configured accumulation count.
  StepResult step(const std::vector<data::Batch>& micro_batches, int64_t iter);
  // The optimizer state laid out over all parameters (collective over dp with the distributed
  // optimizer, which gathers every rank's shard).
  ckpt::FullMoments full_moments();

 private:
  std::vector<int64_t> shard_counts() const;  // elements owned by each dp rank (distributed optimizer)
  Config cfg_;
  comm::Communicator* dp_ = nullptr;
  std::unique_ptr<nn::Model> model_;
  std::unique_ptr<optim::AdamW> opt_;
  optim::LrSchedule schedule_;
  std::vector<float> gathered_m_, gathered_v_;  // full_moments() of a sharded optimizer
};

}  // namespace tessel::train
