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
// data-parallel rank's shard (ZeRO-1: the distributed optimizer). The gradient norm is global: each
// rank's sum of squares over its owned range is summed over every group that holds other parts of the
// model, so every rank clips by the norm of the whole model's gradient.
struct NormGroups {
  comm::Communicator* shard = nullptr;  // data-parallel ranks owning the other shards (distributed optimizer)
  comm::Communicator* tp = nullptr;     // tensor-parallel ranks: replicated parameters count once
  comm::Communicator* pp = nullptr;     // pipeline stages: tied copies (ParamSpec.tied_copy) count once
  comm::Communicator* ep = nullptr;     // expert-parallel ranks: their experts (ParamSpec.expert) add up
};

class AdamW {
 public:
  AdamW(nn::ParamStore& ps, AdamWConfig cfg, int64_t own_begin = 0, int64_t own_end = -1, NormGroups groups = {});
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
  const Tensor& exp_avg() const { return m_; }  // the same, as tensors on the parameters' device
  const Tensor& exp_avg_sq() const { return v_; }

 private:
  nn::ParamStore& ps_;
  AdamWConfig cfg_;
  int64_t begin_, end_;
  NormGroups groups_;
  Tensor m_, v_;
  int64_t step_ = 0;
};


}  // namespace tessel::optim
