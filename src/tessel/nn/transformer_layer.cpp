#include "tessel/nn/transformer_layer.h"

#include "tessel/core/profiler.h"
#include "tessel/kernels/cast.h"

namespace tessel::nn {

namespace {
std::string layer_prefix(int64_t i) { return "model.layers." + std::to_string(i); }
Norm::Kind norm_kind(const ModelConfig& c) { return c.is_llama() ? Norm::Kind::rms : Norm::Kind::layer; }
}  // namespace

TransformerLayer::TransformerLayer(ParamStore& ps, const ModelConfig& cfg, int64_t index,
                                   std::shared_ptr<const kernels::RopeTable> rope, comm::Communicator* tp,
                                   comm::Communicator* cp, comm::Communicator* ep)
    : norm1_(ps, layer_prefix(index) + ".input_layernorm", cfg.hidden_size, norm_kind(cfg), float(cfg.norm_epsilon)),
      attn_(cfg.mla() ? nullptr
                      : std::make_unique<SelfAttention>(ps, layer_prefix(index) + ".self_attn", cfg, cfg.num_layers,
                                                        rope, tp, cp)),
      mla_(cfg.mla() ? std::make_unique<MlaAttention>(ps, layer_prefix(index) + ".self_attn", cfg, cfg.num_layers, rope,
                                                      tp, cp)
                     : nullptr),
      norm2_(ps, layer_prefix(index) + ".post_attention_layernorm", cfg.hidden_size, norm_kind(cfg),
             float(cfg.norm_epsilon)),
      mlp_(cfg.is_moe_layer(index) ? nullptr
                                    : std::make_unique<Mlp>(ps, layer_prefix(index) + ".mlp", cfg, cfg.num_layers, tp)),
      moe_(cfg.is_moe_layer(index) ? std::make_unique<Moe>(ps, layer_prefix(index) + ".mlp", cfg, cfg.num_layers, ep, tp, cp)
                                   : nullptr) {}

Tensor TransformerLayer::forward(const Tensor& r, int64_t batch, Activations& saved, float grad_scale,
                                 bool recomputing) const {
  Tensor r0, r1;
  // Dense attention and MLP take their input as FP8 straight from the norm when the recipe allows
  // (Norm::forward_for); MLA (two Linears read y) and MoE (the router reads y) take it as it is.
  Tensor a = mla_ ? mla_->forward(norm1_.forward(r, Tensor(), r0, saved), batch, saved)
                  : attn_->forward(norm1_.forward_for(attn_->input_linear(), r, Tensor(), r0, saved), batch, saved);
  Tensor m = moe_ ? moe_->forward(norm2_.forward(r, a, r1, saved), grad_scale, saved, recomputing)
                  : mlp_->forward(norm2_.forward_for(mlp_->input_linear(), r, a, r1, saved), saved);
  ProfileScope prof("residual");
  Tensor out = Tensor::empty(r.shape(), DType::f32);
  kernels::add(out.numel(), r1.data<float>(), m.data<float>(), out.data<float>());
  return out;
}

Tensor TransformerLayer::backward_input(const Tensor& dout, Activations& saved) const {
  Tensor dy2 = moe_ ? moe_->backward_input(dout, saved) : mlp_->backward_input(dout, saved);
  Tensor dr1 = norm2_.backward(dy2, dout, saved);  // residual gradient plus the norm's
  Tensor dy = mla_ ? mla_->backward_input(dr1, saved) : attn_->backward_input(dr1, saved);
  return norm1_.backward(dy, dr1, saved);
}

int64_t TransformerLayer::kv_width() const {
  TESSEL_CHECK(attn_, "generation with multi-latent attention is not supported yet");
  return attn_->kv_width();
}

Tensor TransformerLayer::forward_decode(const Tensor& r, int64_t pos0, Tensor& k_cache, Tensor& v_cache) const {
  Activations scratch;
  Tensor r0, r1;
  Tensor y = norm1_.forward(r, Tensor(), r0, scratch);
  TESSEL_CHECK(attn_, "generation with multi-latent attention is not supported yet");
  Tensor a = attn_->forward_decode(y, pos0, k_cache, v_cache);
  Tensor y2 = norm2_.forward(r, a, r1, scratch);
  Tensor m = moe_ ? moe_->forward(y2, 0.0f, scratch) : mlp_->forward(y2, scratch);
  Tensor out = Tensor::empty(r.shape(), DType::f32);
  kernels::add(out.numel(), r1.data<float>(), m.data<float>(), out.data<float>());
  return out;
}

void TransformerLayer::backward_weight(Activations& saved) const {
  if (moe_)
    moe_->backward_weight(saved);
  else
    mlp_->backward_weight(saved);
  if (mla_)
    mla_->backward_weight(saved);
  else
    attn_->backward_weight(saved);
}

}  // namespace tessel::nn
