#include "tessel/train/trainer.h"

#include <vector>

#include "tessel/optim/grad_reducer.h"

namespace tessel::train {

Trainer::Trainer(const Config& cfg, comm::Communicator* dp) : cfg_(cfg), dp_(dp && dp->size() > 1 ? dp : nullptr) {
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
  const int64_t dp = dp_ ? dp_->size() : 1;
  TESSEL_CHECK(int64_t(micro_batches.size()) * dp == cfg_.grad_accumulation_steps(),
               "step: {} micro-batches on each of {} data-parallel ranks, the config needs {} in all",
               micro_batches.size(), dp, cfg_.grad_accumulation_steps());
  int64_t tokens = 0;
  for (const auto& mb : micro_batches) tokens += mb.targets.numel();
  if (dp_) dp_->all_reduce(&tokens, 1, DType::i64, comm::ReduceOp::sum);
  auto& ps = model_->params();
  ps.zero_grads();
  const float scale = 1.0f / float(tokens);  // loss = mean over all tokens of the global batch
  double loss = 0;
  std::unique_ptr<optim::GradReducer> reducer;
  if (dp_) reducer = std::make_unique<optim::GradReducer>(*dp_, ps.grads_data(), cfg_.parallel.ddp_bucket_size);
  for (size_t k = 0; k < micro_batches.size(); ++k) {
    // Gradients are final during the last micro-batch's backward: reduce them as they complete.
    nn::Model::GradsReady ready;
    if (reducer && k + 1 == micro_batches.size())
      ready = [&](int64_t b, int64_t e) { reducer->ready(b, e); };
    loss += model_->forward_backward(micro_batches[k].tokens, micro_batches[k].targets, scale, ready);
  }
  if (dp_) {
    reducer->finish();
    // The loss sums travel as 8-byte words and are added in rank order: exact doubles, same on every rank.
    std::vector<double> all(static_cast<size_t>(dp));
    dp_->all_gather(&loss, all.data(), 1, DType::i64);
    loss = 0;
    for (double l : all) loss += l;
  }
  const double lr = schedule_.at(iter);
  const double norm = opt_->step(lr);
  return {loss / double(tokens), norm, lr};
}

}  // namespace tessel::train
