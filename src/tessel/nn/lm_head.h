#pragma once
// Output head fused with the loss: logits [N, V] = x @ W^T (W = lm_head.weight, or the token
// embedding when tied), then softmax cross-entropy that writes dlogits in the same sweep.
#include <string>

#include "tessel/nn/activations.h"
#include "tessel/nn/model_config.h"
#include "tessel/nn/params.h"

namespace tessel::nn {

class LmHead {
 public:
  LmHead(ParamStore& ps, const ModelConfig& cfg, int64_t embedding_offset);
  Tensor logits(const Tensor& x) const;  // [N, V] f32, nothing saved
  // Returns the summed loss over rows; saves x and dlogits = d(loss * grad_scale)/dlogits.
  double forward_loss(const Tensor& x, const Tensor& targets, float grad_scale, Activations& saved) const;
  Tensor backward_input(Activations& saved) const;  // dx [N, d] f32
  void backward_weight(Activations& saved) const;

 private:
  ParamStore& ps_;
  int64_t V_, D_;
  int64_t w_offset_;
  std::string key_x_ = "lm_head.x", key_dlogits_ = "lm_head.dlogits";
};

}  // namespace tessel::nn
