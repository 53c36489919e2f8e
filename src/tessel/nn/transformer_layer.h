#pragma once
// One pre-norm decoder layer:  r1 = r + attn(norm1(r));  out = r1 + mlp(norm2(r1)).
// The residual add in front of norm2 is fused into the norm kernel.
#include <memory>
#include <string>

#include "tessel/nn/attention.h"
#include "tessel/nn/mlp.h"
#include "tessel/nn/norm.h"

namespace tessel::nn {

class TransformerLayer {
 public:
  TransformerLayer(ParamStore& ps, const ModelConfig& cfg, int64_t index,
                   std::shared_ptr<const kernels::RopeTable> rope, comm::Communicator* tp = nullptr,
                   comm::Communicator* cp = nullptr);
  Tensor forward(const Tensor& r, int64_t batch, Activations& saved) const;  // r [N, d] f32
  Tensor backward_input(const Tensor& dout, Activations& saved) const;      // -> dr [N, d] f32
  void backward_weight(Activations& saved) const;
  // Inference over positions pos0 .. pos0 + n - 1 with this layer's KV cache (see SelfAttention).
  Tensor forward_decode(const Tensor& r, int64_t pos0, Tensor& k_cache, Tensor& v_cache) const;
  int64_t kv_width() const { return attn_.kv_width(); }

 private:
  Norm norm1_;
  SelfAttention attn_;
  Norm norm2_;
  Mlp mlp_;
};

}  // namespace tessel::nn
