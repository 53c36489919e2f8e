#pragma once
// AdamW over a ParamStore's flat buffers, with global-norm gradient clipping (as torch's
// clip_grad_norm_: scale = max_norm / (norm + 1e-6) when that is below 1) and no weight decay on
// parameters registered without it (norms, biases).
#include <vector>

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

class AdamW {
 public:
  AdamW(nn::ParamStore& ps, AdamWConfig cfg);
  // Clips (inside the update), updates the fp32 master weights at learning rate lr and their bf16
  // compute copy.
  // Returns the global gradient norm before clipping.
  double step(double lr);
  int64_t steps_taken() const { return step_; }
  // Moments, laid out like the parameters' flat buffer.
  float* exp_avg_data() const { return m_.data<float>(); }
  float* exp_avg_sq_data() const { return v_.data<float>(); }
  void set_steps_taken(int64_t s) { step_ = s; }

 private:
  nn::ParamStore& ps_;
  AdamWConfig cfg_;
  Tensor m_, v_;
  int64_t step_ = 0;
};

double grad_norm(const nn::ParamStore& ps);

}  // namespace tessel::optim
