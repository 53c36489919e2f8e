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

// The optimizer owns the elements of the parameters' flat range that the store's shard names
// (nn::FlatShard: all of them, or one rank's shard under the distributed optimizer, ZeRO-1), and keeps
// their moments packed in the shard's local order. The gradient norm is global: each rank's sum of
// squares over what it owns is summed over every group that holds other parts of the model, so every
// rank clips by the norm of the whole model's gradient.
struct NormGroups {
  comm::Communicator* shard = nullptr;  // ranks owning the other shards of the replicated parameters (distributed optimizer)
  comm::Communicator* tp = nullptr;     // tensor-parallel ranks: replicated parameters count once
  comm::Communicator* pp = nullptr;     // pipeline stages: tied copies (ParamSpec.tied_copy) count once
  comm::Communicator* ep = nullptr;     // expert-parallel ranks: their experts (ParamSpec.expert) add up
  // Ranks owning the other shards of the same experts (distributed optimizer under expert parallelism).
  comm::Communicator* expert_shard = nullptr;
};

class AdamW {
 public:
  // Owns the store's shard (ps.shard()).
  explicit AdamW(nn::ParamStore& ps, AdamWConfig cfg = {}, NormGroups groups = {});
  // Owns the flat range [own_begin, own_end) (own_end -1: to the end); a store with sharded masters
  // takes only its own shard.
  AdamW(nn::ParamStore& ps, AdamWConfig cfg, int64_t own_begin, int64_t own_end, NormGroups groups = {});
  // Clips (inside the update), updates the owned fp32 master weights at learning rate lr (and their
  // bf16 compute copy). Reads the owned range of the gradients. Returns the global gradient norm
  // before clipping.
  double step(double lr);
  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t s) { step_ = s; }
  const nn::FlatShard& owned() const { return owned_; }
  bool owns_all() const { return owned_.owns_all(); }
  // Moments of the owned elements, packed in owned()'s local order.
  float* exp_avg_data() const { return m_.data<float>(); }
  float* exp_avg_sq_data() const { return v_.data<float>(); }
  const Tensor& exp_avg() const { return m_; }  // the same, as tensors on the parameters' device
  const Tensor& exp_avg_sq() const { return v_; }

 private:
  AdamW(nn::ParamStore& ps, AdamWConfig cfg, nn::FlatShard owned, NormGroups groups);
  nn::ParamStore& ps_;
  AdamWConfig cfg_;
  nn::FlatShard owned_;
  NormGroups groups_;
  Tensor m_, v_;
  int64_t step_ = 0;
};


}  // namespace tessel::optim
