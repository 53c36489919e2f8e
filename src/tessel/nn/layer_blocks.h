#pragma once
// The two halves of a transformer layer, as interfaces: an attention block (MHA/GQA:
// SelfAttention; multi-latent attention: MlaAttention) and an MLP block (dense: Mlp; Mixture of
// Experts: Moe). TransformerLayer holds one of each and no branches; a new block (a vision
// encoder's, another attention) plugs in by implementing one of these.
//
// Shapes: y, dout, dy are [N, d] (N: this rank's rows of the micro-batch, d: hidden size), f32
// unless y arrives as FP8 from the norm (see input_linear()).
#include <cstdint>

#include "tessel/core/tensor.h"
#include "tessel/nn/linear.h"

namespace tessel::nn {

class Activations;

class AttentionBlock {
 public:
  virtual ~AttentionBlock() = default;
  // The one Linear that reads y, when only one does: the norm before the block then writes y as
  // that Linear's FP8 input directly (Norm::forward_for). Null when several read y.
  virtual const Linear* input_linear() const { return nullptr; }
  // batch: sequences in the micro-batch (N / batch rows each on this rank).
  virtual Tensor forward(const LinearInput& y, int64_t batch, Activations& saved) = 0;
  virtual Tensor backward_input(const Tensor& dout, Activations& saved) = 0;  // -> dy
  virtual void backward_weight(Activations& saved) = 0;
  // Inference over positions pos0 .. pos0 + n - 1 with this layer's KV cache ([seq, kv_width()]).
  virtual Tensor forward_decode(const Tensor& y, int64_t pos0, Tensor& k_cache, Tensor& v_cache) = 0;
  virtual int64_t kv_width() const = 0;
};

class MlpBlock {
 public:
  virtual ~MlpBlock() = default;
  virtual const Linear* input_linear() const { return nullptr; }  // as for AttentionBlock
  // grad_scale: the micro-batch's loss scale (auxiliary losses; 0 in evaluation). recomputing:
  // activation recompute's second forward (statistics are not counted again).
  virtual Tensor forward(const LinearInput& y, float grad_scale, Activations& saved, bool recomputing) = 0;
  virtual Tensor backward_input(const Tensor& dout, Activations& saved) = 0;  // -> dy
  virtual void backward_weight(Activations& saved) = 0;
};

}  // namespace tessel::nn
