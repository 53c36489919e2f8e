#pragma once
// Output head fused with the loss: logits [N, V] = x @ W^T (W = lm_head.weight, or the token
// embedding when tied), then softmax cross-entropy that writes dlogits in the same sweep.
#include <string>

#include "tessel/core/deep_const.h"
#include "tessel/comm/communicator.h"
#include "tessel/nn/activations.h"
#include "tessel/nn/model_config.h"
#include "tessel/nn/params.h"

namespace tessel::nn {

class LmHead {
 public:
  // tp (optional): vocabulary-parallel head (rows [vocab_begin, vocab_begin + V/n) of the weight,
  // tied or not) with vocabulary-parallel cross-entropy. embedding_offset: the token embedding's
  // weight when tied and held by this store, else -1.
  LmHead(ParamStore& ps, const ModelConfig& cfg, int64_t embedding_offset, comm::Communicator* tp = nullptr);
  // With cfg.sequence_parallel, x is this rank's rows of the micro-batch (as dx from backward_input).
  Tensor logits(const Tensor& x) const;  // [N, V] f32 (this rank's vocabulary slice under tp), nothing saved
  double loss_sum(const Tensor& x, const Tensor& targets) const;  // evaluation
  // Returns the summed loss over rows; saves x and dlogits = d(loss * grad_scale)/dlogits.
  // tag: distinguishes several uses of the head in one micro-batch (multi-token prediction).
  double forward_loss(const Tensor& x, const Tensor& targets, float grad_scale, Activations& saved,
                      const std::string& tag = "") const;
  Tensor backward_input(Activations& saved, const std::string& tag = "");  // dx [N, d] f32
  void backward_weight(Activations& saved, const std::string& tag = "");

 private:
  Tensor all_rows(const Tensor& x) const;  // x in the compute dtype, all-gathered under sequence parallelism
  Tensor logits_of_rows(const Tensor& xc) const;  // xc: all rows, compute dtype
  DeepConstPtr<ParamStore> ps_;  // const methods see a const store (core/deep_const.h)
  bool sequence_parallel_ = false;  // x and dx are this rank's rows
  int64_t V_, D_;  // V_: this rank's vocabulary rows
  int64_t w_offset_;
  comm::Communicator* tp_ = nullptr;
  int64_t vocab_begin_ = 0;
  std::string key_x_ = "lm_head.x", key_dlogits_ = "lm_head.dlogits";
};

}  // namespace tessel::nn
