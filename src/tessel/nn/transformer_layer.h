#pragma once
// One pre-norm decoder layer:  r1 = r + attn(norm1(r));  out = r1 + mlp(norm2(r1)).
// The residual add in front of norm2 is fused into the norm kernel. attn is an AttentionBlock
// (MHA/GQA or multi-latent attention), mlp an MlpBlock (dense or Mixture of Experts).
#include <memory>
#include <string>

#include "tessel/core/deep_const.h"
#include "tessel/kernels/rope.h"
#include "tessel/nn/layer_blocks.h"
#include "tessel/nn/model_config.h"
#include "tessel/nn/norm.h"

namespace tessel::nn {

class Moe;

class TransformerLayer {
 public:
  TransformerLayer(ParamStore& ps, const ModelConfig& cfg, int64_t index,
                   std::shared_ptr<const kernels::RopeTable> rope, comm::Communicator* tp = nullptr,
                   comm::Communicator* cp = nullptr, comm::Communicator* ep = nullptr);
  // r [N, d] f32. grad_scale: the micro-batch's loss scale (MoE auxiliary losses); 0 in evaluation.
  // recomputing: activation recompute's second forward (MoE statistics are not counted again).
  Tensor forward(const Tensor& r, int64_t batch, Activations& saved, float grad_scale = 0.0f,
                 bool recomputing = false);
  Tensor backward_input(const Tensor& dout, Activations& saved);      // -> dr [N, d] f32
  void backward_weight(Activations& saved);
  // Inference over positions pos0 .. pos0 + n - 1 with this layer's KV cache (see SelfAttention).
  Tensor forward_decode(const Tensor& r, int64_t pos0, Tensor& k_cache, Tensor& v_cache);
  int64_t kv_width() const;

 private:
  Norm norm1_;
  DeepConstOwner<AttentionBlock> attn_;
  Norm norm2_;
  DeepConstOwner<MlpBlock> mlp_;
  DeepConstPtr<Moe> moe_ = nullptr;  // mlp_ when this is a Mixture-of-Experts layer (model.num_experts > 0)

 public:
  Moe* moe() { return moe_.get(); }
  const Moe* moe() const { return moe_.get(); }
};

}  // namespace tessel::nn
