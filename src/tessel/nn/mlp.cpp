#include "tessel/nn/mlp.h"

#include <cmath>

#include "tessel/core/profiler.h"
#include "tessel/kernels/act.h"
#include "tessel/kernels/fp8_quantize.h"

namespace tessel::nn {

namespace {
std::vector<Linear::Part> up_parts(const std::string& prefix, const ModelConfig& cfg, int64_t ffn) {
  if (cfg.is_llama()) return {{prefix + ".gate_proj", ffn}, {prefix + ".up_proj", ffn}};
  return {{prefix + ".up_proj", ffn}};
}
int64_t ffn_of(const ModelConfig& cfg, int64_t ffn) { return ffn > 0 ? ffn : cfg.ffn_hidden_size; }
}  // namespace

Mlp::Mlp(ParamStore& ps, const std::string& prefix, const ModelConfig& cfg, int64_t layer_count,
         comm::Communicator* tp, int64_t ffn)
    : ps_(&ps),
      swiglu_(cfg.is_llama()),
      F_(ffn_of(cfg, ffn) / (tp ? tp->size() : 1)),
      up_(ps, up_parts(prefix, cfg, ffn_of(cfg, ffn)), cfg.hidden_size, !cfg.is_llama(), float(cfg.init_method_std),
          {TensorParallel::Mode::column, tp, cfg.sequence_parallel}),
      down_(ps, {{prefix + ".down_proj", cfg.hidden_size}}, ffn_of(cfg, ffn), !cfg.is_llama(),
            float(cfg.init_method_std / std::sqrt(2.0 * double(layer_count))),
            {TensorParallel::Mode::row, tp, cfg.sequence_parallel}),
      key_h_(prefix + ".pre_act") {}

Tensor Mlp::forward(const LinearInput& y, Activations& saved) {
  Tensor h = up_.forward(y, saved);  // llama [N, 2F] (gate | up), gpt2 [N, F]
  saved.put(key_h_, h);
  return down_.forward(activate(h), saved);
}

LinearInput Mlp::activate(const Tensor& h) const {
  ProfileScope prof("activation");
  const int64_t N = h.size(0);
  if (down_.takes_fp8_input()) {  // written as down_proj's FP8 input directly
    Fp8Input q = down_.fp8_input(N);
    kernels::activation_forward_fp8(swiglu_, h, F_, q.out,
                                    {&q.rows.data, &q.rows.scale_inv, &q.cols_t.data, &q.cols_t.scale_inv, &q.amax});
    return q;
  }
  Tensor a = Tensor::empty({N, F_}, ps_->compute_dtype());
  kernels::activation_forward(swiglu_ ? kernels::Activation::swiglu : kernels::Activation::gelu, h, a);
  return a;
}

Tensor Mlp::backward_input(const Tensor& dout, Activations& saved) {
  Tensor da = down_.backward_input(dout, saved);  // [N, F] f32
  const Tensor& h = saved.get(key_h_);
  Tensor dh = Tensor::empty(h.shape(), ps_->compute_dtype());
  {
    ProfileScope prof("activation");
    kernels::activation_backward(swiglu_ ? kernels::Activation::swiglu : kernels::Activation::gelu, h, da, dh);
  }
  saved.erase(key_h_);
  return up_.backward_input(dh, saved);
}

void Mlp::backward_weight(Activations& saved) {
  down_.backward_weight(saved);
  up_.backward_weight(saved);
}

MemoryAmount Mlp::cached_bytes() const {
  return up_.cached_bytes() + down_.cached_bytes();
}

}  // namespace tessel::nn
