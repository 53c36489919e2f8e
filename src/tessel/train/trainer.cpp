#include "tessel/train/trainer.h"

namespace tessel::train {

Trainer::Trainer(const Config& cfg) : cfg_(cfg) {
  model_ = std::make_unique<nn::Model>(cfg_.model);
  model_->params().initialize(uint64_t(cfg_.train.seed));
  optim::AdamWConfig oc;
  oc.beta1 = cfg_.train.adam_beta1;
  oc.beta2 = cfg_.train.adam_beta2;
  oc.eps = cfg_.train.adam_eps;
  oc.weight_decay = cfg_.train.weight_decay;
  oc.clip_grad = cfg_.train.clip_grad;
  opt_ = std::make_unique<optim::AdamW>(model_->params(), oc);
  schedule_.lr = cfg_.train.lr;
  schedule_.min_lr = cfg_.train.min_lr;
  schedule_.warmup_iters = cfg_.train.lr_warmup_iters;
  schedule_.total_iters = std::max<int64_t>(1, cfg_.train.train_iters);
  schedule_.style = cfg_.train.lr_decay_style;
  schedule_.wsd_decay_iters = cfg_.train.lr_wsd_decay_iters;
  schedule_.validate();
}

StepResult Trainer::step(const std::vector<data::Batch>& micro_batches, int64_t iter) {
  TESSEL_CHECK(int64_t(micro_batches.size()) == cfg_.grad_accumulation_steps(),
               "step: {} micro-batches given, the config needs {}", micro_batches.size(),
               cfg_.grad_accumulation_steps());
  int64_t tokens = 0;
  for (const auto& mb : micro_batches) tokens += mb.targets.numel();
  model_->params().zero_grads();
  const float scale = 1.0f / float(tokens);  // loss = mean over all tokens of the global batch
  double loss = 0;
  for (const auto& mb : micro_batches) loss += model_->forward_backward(mb.tokens, mb.targets, scale);
  const double lr = schedule_.at(iter);
  const double norm = opt_->step(lr);
  return {loss / double(tokens), norm, lr};
}

}  // namespace tessel::train
