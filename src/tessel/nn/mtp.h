#pragma once
// Multi-token prediction (DeepSeek-V3 report, section 2.2): D sequential modules on the last pipeline
// stage, after the main model. Module k (from 1) at position i combines the previous depth's hidden
// state with the embedding of token i + k, runs one transformer layer and predicts token i + k + 1
// through the model's output head (shared, as the embedding is):
//   h_k = layer_k(eh_proj_k([enorm_k(emb(t_{i+k})), hnorm_k(h_{k-1})])),  loss_k = xent(head(norm_k(h_k)))
// h_0 is the main model's last hidden state (before its final norm). The modules' losses, scaled by
// mtp_loss_scaling_factor / D, add to the objective; their value is reported apart from the loss.
// Parameters are named as Hugging Face DeepSeek-V3 names them: the layers after the main model's.
#include <memory>
#include <utility>
#include <vector>

#include "tessel/core/deep_const.h"
#include "tessel/nn/embedding.h"
#include "tessel/nn/lm_head.h"
#include "tessel/nn/norm.h"
#include "tessel/nn/transformer_layer.h"

namespace tessel::nn {

class MultiTokenPrediction {
 public:
  // cfg.mtp_num_layers modules registered in `ps` (rope, tp, cp, ep as the main model's layers).
  MultiTokenPrediction(ParamStore& ps, const ModelConfig& cfg, std::shared_ptr<const kernels::RopeTable> rope,
                       comm::Communicator* tp, comm::Communicator* cp, comm::Communicator* ep);
  size_t depth() const { return modules_.size(); }
  TransformerLayer& layer(size_t k) { return *modules_[k].layer; }
  const TransformerLayer& layer(size_t k) const { return *modules_[k].layer; }

  // Training forward after the main model: h [rows, d] its last hidden state, targets [B, T] (this
  // rank's rows under context parallelism), batch B. The summed loss and the tokens it counts
  // accumulate until take_loss().
  void forward(Tensor h, const Tensor& targets, float grad_scale, int64_t batch, const Embedding& embedding,
               const LmHead& head, Activations& saved);
  // Input and weight gradients of every module (last first); returns the gradient into h_0.
  Tensor backward(Embedding& embedding, LmHead& head, Activations& saved);
  std::pair<double, int64_t> take_loss();  // (loss sum, tokens) since the last call, then reset

 private:
  struct Module {
    DeepConstOwner<Norm> enorm, hnorm, head_norm;
    DeepConstOwner<Linear> eh_proj;
    DeepConstOwner<TransformerLayer> layer;
  };
  int64_t d_;              // hidden size
  double loss_scale_;      // mtp_loss_scaling_factor / depth
  comm::Communicator* cp_;
  std::vector<Module> modules_;
  double loss_sum_ = 0;
  int64_t tokens_ = 0;
};

}  // namespace tessel::nn
