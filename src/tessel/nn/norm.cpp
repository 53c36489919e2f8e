#include "tessel/nn/norm.h"

#include "tessel/core/profiler.h"
#include "tessel/kernels/fp8_fused.h"
#include "tessel/kernels/norm.h"

namespace tessel::nn {

Norm::Norm(ParamStore& ps, const std::string& prefix, int64_t D, Kind kind, float eps)
    : ps_(ps), D_(D), kind_(kind), eps_(eps) {
  w_offset_ = ps.add(prefix + ".weight", {D}, Init::ones, 0.0f, false);
  if (kind == Kind::layer) b_offset_ = ps.add(prefix + ".bias", {D}, Init::zeros, 0.0f, false);
  key_x_ = prefix + ".x";
  key_rstd_ = prefix + ".rstd";
  key_mean_ = prefix + ".mean";
}

template <class Write>
void Norm::run(const Tensor& r_in, const Tensor& delta, Tensor& r_out, Activations& saved, Write&& write) const {
  ProfileScope prof("norm");
  const int64_t N = r_in.size(0);
  TESSEL_CHECK(r_in.dim() == 2 && r_in.size(1) == D_, "norm '{}': input {} does not have {} features", key_x_,
               r_in.str(), D_);
  r_out = delta.defined() ? Tensor::empty(r_in.shape(), DType::f32) : r_in;
  const float* dp = delta.defined() ? delta.data<float>() : nullptr;
  const float* w = ps_.params_data() + w_offset_;
  const float* b = kind_ == Kind::layer ? ps_.params_data() + b_offset_ : nullptr;
  Tensor rstd = Tensor::empty({N}, DType::f32);
  Tensor mean = kind_ == Kind::layer ? Tensor::empty({N}, DType::f32) : Tensor();
  write(r_in.data<float>(), dp, r_out.data<float>(), w, b, mean.defined() ? mean.data<float>() : nullptr,
        rstd.data<float>());
  if (mean.defined()) saved.put(key_mean_, mean);
  saved.put(key_x_, r_out);
  saved.put(key_rstd_, rstd);
}

Tensor Norm::forward(const Tensor& r_in, const Tensor& delta, Tensor& r_out, Activations& saved) const {
  Tensor y = Tensor::empty(r_in.shape(), ps_.compute_dtype());
  run(r_in, delta, r_out, saved, [&](const float* x, const float* d, float* r, const float* w, const float* b,
                                     float* mean, float* rstd) {
    const int64_t N = r_in.size(0);
    auto norm = [&](auto* out) {
      if (kind_ == Kind::rms)
        kernels::rmsnorm_fwd(N, D_, x, d, r, w, eps_, out, rstd);
      else
        kernels::layernorm_fwd(N, D_, x, d, r, w, b, eps_, out, mean, rstd);
    };
    if (y.dtype() == DType::bf16)
      norm(y.data<bf16>());
    else
      norm(y.data<float>());
  });
  return y;
}

LinearInput Norm::forward_for(const Linear& consumer, const Tensor& r_in, const Tensor& delta, Tensor& r_out,
                              Activations& saved) const {
  if (!consumer.takes_fp8_input()) return forward(r_in, delta, r_out, saved);
  Fp8Input q = consumer.fp8_input(r_in.size(0));
  run(r_in, delta, r_out, saved, [&](const float* x, const float* d, float* r, const float* w, const float* b,
                                     float* mean, float* rstd) {
    const int64_t N = r_in.size(0);
    if (kind_ == Kind::rms)
      kernels::rmsnorm_fwd_fp8(N, D_, x, d, r, w, eps_, q.out, rstd);
    else
      kernels::layernorm_fwd_fp8(N, D_, x, d, r, w, b, eps_, q.out, mean, rstd);
  });
  return q;
}

Tensor Norm::backward(const Tensor& dy, const Tensor& dresid, Activations& saved) const {
  ProfileScope prof("norm");
  const Tensor& x = saved.get(key_x_);
  const Tensor& rstd = saved.get(key_rstd_);
  const int64_t N = x.size(0);
  // A fresh dx, never written over dresid: dresid may also be saved (as a Linear's dy) for a deferred W.
  Tensor dx = Tensor::empty(x.shape(), DType::f32);
  const float* dr = dresid.defined() ? dresid.data<float>() : nullptr;
  const float* w = ps_.params_data() + w_offset_;
  float* dw = ps_.grads_data() + w_offset_;
  if (kind_ == Kind::rms) {
    kernels::rmsnorm_bwd(N, D_, x.data<float>(), w, rstd.data<float>(), dy.data<float>(), dr, dx.data<float>(), dw);
  } else {
    kernels::layernorm_bwd(N, D_, x.data<float>(), w, saved.get(key_mean_).data<float>(), rstd.data<float>(),
                           dy.data<float>(), dr, dx.data<float>(), dw, ps_.grads_data() + b_offset_);
    saved.erase(key_mean_);
  }
  saved.erase(key_x_);
  saved.erase(key_rstd_);
  return dx;
}

}  // namespace tessel::nn
