#include "tessel/optim/adamw.h"

#include <cmath>

#include "tessel/core/profiler.h"
#include "tessel/kernels/adamw.h"

namespace tessel::optim {

AdamW::AdamW(nn::ParamStore& ps, AdamWConfig cfg)
    : ps_(ps), cfg_(cfg), m_(Tensor::zeros({ps.numel()}, DType::f32)), v_(Tensor::zeros({ps.numel()}, DType::f32)) {}

double grad_norm(const nn::ParamStore& ps) { return std::sqrt(kernels::sum_squares(ps.numel(), ps.grads_data())); }

double AdamW::step(double lr) {
  ProfileScope prof("optimizer");
  const double norm = grad_norm(ps_);
  float grad_scale = 1.0f;  // clipping, applied inside the update (the stored gradients keep their values)
  if (cfg_.clip_grad > 0) {
    const double coef = cfg_.clip_grad / (norm + 1e-6);
    if (coef < 1.0) grad_scale = float(coef);
  }
  ++step_;
  bf16* copy = ps_.compute_dtype() == DType::bf16 ? ps_.compute_at(0, {ps_.numel()}).data<bf16>() : nullptr;
  for (const auto& s : ps_.specs()) {
    const kernels::AdamWHyper h{float(lr), float(cfg_.beta1), float(cfg_.beta2), float(cfg_.eps),
                                s.weight_decay ? float(cfg_.weight_decay) : 0.0f, step_};
    kernels::adamw_update(s.numel, ps_.params_data() + s.offset, ps_.grads_data() + s.offset,
                          m_.data<float>() + s.offset, v_.data<float>() + s.offset, h, grad_scale,
                          copy ? copy + s.offset : nullptr);
  }
  return norm;
}

}  // namespace tessel::optim
