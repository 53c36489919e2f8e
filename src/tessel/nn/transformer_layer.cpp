#include "tessel/nn/transformer_layer.h"

#include "tessel/core/profiler.h"
#include "tessel/kernels/cast.h"
#include "tessel/nn/attention.h"
#include "tessel/nn/mla.h"
#include "tessel/nn/mlp.h"
#include "tessel/nn/moe.h"

namespace tessel::nn {

namespace {

std::string layer_prefix(int64_t i) { return "model.layers." + std::to_string(i); }
Norm::Kind norm_kind(const ModelConfig& c) { return c.is_llama() ? Norm::Kind::rms : Norm::Kind::layer; }

std::unique_ptr<AttentionBlock> make_attention(ParamStore& ps, const ModelConfig& cfg, int64_t index,
                                               std::shared_ptr<const kernels::RopeTable> rope, comm::Communicator* tp,
                                               comm::Communicator* cp) {
  const std::string prefix = layer_prefix(index) + ".self_attn";
  if (cfg.mla()) return std::make_unique<MlaAttention>(ps, prefix, cfg, cfg.num_layers, std::move(rope), tp, cp);
  return std::make_unique<SelfAttention>(ps, prefix, cfg, cfg.num_layers, std::move(rope), tp, cp);
}

// A block's input from the norm in front of it: FP8 for the block's one input Linear when the
// recipe allows (Norm::forward_for), else as it is (MLA: two Linears read it; MoE: the router).
template <class Block>
LinearInput normed(const Norm& norm, const Block& block, const Tensor& r_in, const Tensor& delta, Tensor& r_out,
                   Activations& saved) {
  if (const Linear* consumer = block.input_linear()) return norm.forward_for(*consumer, r_in, delta, r_out, saved);
  return norm.forward(r_in, delta, r_out, saved);
}

}  // namespace

TransformerLayer::TransformerLayer(ParamStore& ps, const ModelConfig& cfg, int64_t index,
                                   std::shared_ptr<const kernels::RopeTable> rope, comm::Communicator* tp,
                                   comm::Communicator* cp, comm::Communicator* ep)
    : norm1_(ps, layer_prefix(index) + ".input_layernorm", cfg.hidden_size, norm_kind(cfg), float(cfg.norm_epsilon)),
      attn_(make_attention(ps, cfg, index, std::move(rope), tp, cp)),
      norm2_(ps, layer_prefix(index) + ".post_attention_layernorm", cfg.hidden_size, norm_kind(cfg),
             float(cfg.norm_epsilon)) {
  if (cfg.is_moe_layer(index)) {
    auto moe = std::make_unique<Moe>(ps, layer_prefix(index) + ".mlp", cfg, cfg.num_layers, ep, tp, cp);
    moe_ = moe.get();
    mlp_ = std::move(moe);
  } else {
    mlp_ = std::make_unique<Mlp>(ps, layer_prefix(index) + ".mlp", cfg, cfg.num_layers, tp);
  }
}

Tensor TransformerLayer::forward(const Tensor& r, int64_t batch, Activations& saved, float grad_scale,
                                 bool recomputing) {
  Tensor r0, r1;
  Tensor a = attn_->forward(normed(norm1_, *attn_, r, Tensor(), r0, saved), batch, saved);
  Tensor m = mlp_->forward(normed(norm2_, *mlp_, r, a, r1, saved), grad_scale, saved, recomputing);
  ProfileScope prof("residual");
  Tensor out = Tensor::empty(r.shape(), DType::f32);
  kernels::add(r1, m, out);
  return out;
}

Tensor TransformerLayer::backward_input(const Tensor& dout, Activations& saved) {
  Tensor dy2 = mlp_->backward_input(dout, saved);
  Tensor dr1 = norm2_.backward(dy2, dout, saved);  // residual gradient plus the norm's
  Tensor dy = attn_->backward_input(dr1, saved);
  return norm1_.backward(dy, dr1, saved);
}

int64_t TransformerLayer::kv_width() const { return attn_->kv_width(); }

Tensor TransformerLayer::forward_decode(const Tensor& r, int64_t pos0, Tensor& k_cache, Tensor& v_cache) {
  Activations scratch;
  Tensor r0, r1;
  Tensor y = norm1_.forward(r, Tensor(), r0, scratch);
  Tensor a = attn_->forward_decode(y, pos0, k_cache, v_cache);
  Tensor y2 = norm2_.forward(r, a, r1, scratch);
  Tensor m = mlp_->forward(y2, 0.0f, scratch, false);
  Tensor out = Tensor::empty(r.shape(), DType::f32);
  kernels::add(r1, m, out);
  return out;
}

void TransformerLayer::backward_weight(Activations& saved) {
  mlp_->backward_weight(saved);
  attn_->backward_weight(saved);
}

}  // namespace tessel::nn
