#pragma once
// AdamW over a ParamStore's flat buffers, with global-norm gradient clipping (as torch's
// clip_grad_norm_: scale = max_norm / (norm + 1e-6) when that is below 1) and no weight decay on
// parameters registered without it (norms, biases).
#include <vector>

#include "tessel/comm/communicator.h"
#include "tessel/nn/params.h"

namespace tessel::optim {

struct AdamWConfig {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double clip_grad = 1.0;  // <= 0: no clipping
};

// The optimizer owns the flat range [own_begin, own_end) of the parameters: all of them, or one
// data-parallel rank's shard (ZeRO-1: the distributed optimizer), with the gradient norm's sum of
// squares all-reduced over norm_group so every shard clips by the global norm.
class AdamW {
 public:
  // tp_group: tensor-parallel ranks holding the other shards of sharded parameters (replicated
  // parameters, identical on every tensor-parallel rank, count once in the norm).
  AdamW(nn::ParamStore& ps, AdamWConfig cfg, int64_t own_begin = 0, int64_t own_end = -1,
        comm::Communicator* norm_group = nullptr, comm::Communicator* tp_group = nullptr);
  // Clips (inside the update), updates the owned fp32 master weights at learning rate lr (and their
  // bf16 compute copy). Reads the owned range of the gradients. Returns the global gradient norm
  // before clipping.
  double step(double lr);
  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t s) { step_ = s; }
  int64_t own_begin() const { return begin_; }
  int64_t own_end() const { return end_; }
  bool owns_all() const { return begin_ == 0 && end_ == ps_.numel(); }
  // Moments of the owned range (element 0 is parameter element own_begin).
  float* exp_avg_data() const { return m_.data<float>(); }
  float* exp_avg_sq_data() const { return v_.data<float>(); }

 private:
  nn::ParamStore& ps_;
  AdamWConfig cfg_;
  int64_t begin_, end_;
  comm::Communicator* norm_group_;
  comm::Communicator* tp_group_;
  Tensor m_, v_;
  int64_t step_ = 0;
};


}  // namespace tessel::optim
