#include "tessel/nn/norm.h"

#include "tessel/core/profiler.h"
#include "tessel/kernels/fp8_quantize.h"
#include "tessel/kernels/norm.h"

namespace tessel::nn {

Norm::Norm(ParamStore& ps, const std::string& prefix, int64_t D, Kind kind, float eps)
    : ps_(&ps), D_(D), kind_(kind), eps_(eps) {
  w_offset_ = ps.add(prefix + ".weight", {D}, Init::ones, 0.0f, false);
  ps.mark_f32_compute(w_offset_);  // norms compute in fp32
  if (kind == Kind::layer) {
    b_offset_ = ps.add(prefix + ".bias", {D}, Init::zeros, 0.0f, false);
    ps.mark_f32_compute(b_offset_);
  }
  key_x_ = prefix + ".x";
  key_rstd_ = prefix + ".rstd";
  key_mean_ = prefix + ".mean";
}

namespace {
kernels::NormKind kernel_kind(Norm::Kind k) { return k == Norm::Kind::rms ? kernels::NormKind::rms : kernels::NormKind::layer; }
}  // namespace

// Allocates r_out (r_in itself without delta), rstd and for LayerNorm mean; `write(r_out, mean,
// rstd)` fills them and the output; saves what backward needs.
template <class Write>
void Norm::run(const Tensor& r_in, const Tensor& delta, Tensor& r_out, Activations& saved, Write&& write) const {
  ProfileScope prof("norm");
  const int64_t N = r_in.size(0);
  TESSEL_CHECK(r_in.dim() == 2 && r_in.size(1) == D_, "norm '{}': input {} does not have {} features", key_x_,
               r_in.str(), D_);
  r_out = delta.defined() ? Tensor::empty(r_in.shape(), DType::f32) : r_in;
  Tensor rstd = Tensor::empty({N}, DType::f32);
  Tensor mean = kind_ == Kind::layer ? Tensor::empty({N}, DType::f32) : Tensor();
  write(r_out, mean, rstd);
  if (mean.defined()) saved.put(key_mean_, mean);
  saved.put(key_x_, r_out);
  saved.put(key_rstd_, rstd);
}

Tensor Norm::forward(const Tensor& r_in, const Tensor& delta, Tensor& r_out, Activations& saved) const {
  Tensor y = Tensor::empty(r_in.shape(), ps_->compute_dtype());
  run(r_in, delta, r_out, saved, [&](const Tensor& r, const Tensor& mean, const Tensor& rstd) {
    kernels::norm_forward(kernel_kind(kind_), r_in, delta, r, ps_->f32_at(w_offset_, {D_}),
                          kind_ == Kind::layer ? ps_->f32_at(b_offset_, {D_}) : Tensor(), eps_, y, mean, rstd);
  });
  return y;
}

LinearInput Norm::forward_for(const Linear& consumer, const Tensor& r_in, const Tensor& delta, Tensor& r_out,
                              Activations& saved) const {
  if (!consumer.takes_fp8_input()) return forward(r_in, delta, r_out, saved);
  Fp8Input q = consumer.fp8_input(r_in.size(0));
  run(r_in, delta, r_out, saved, [&](const Tensor& r, const Tensor& mean, const Tensor& rstd) {
    kernels::norm_forward_fp8(kernel_kind(kind_), r_in, delta, r, ps_->f32_at(w_offset_, {D_}),
                              kind_ == Kind::layer ? ps_->f32_at(b_offset_, {D_}) : Tensor(), eps_, q.out,
                              {&q.rows.data, &q.rows.scale_inv, &q.cols_t.data, &q.cols_t.scale_inv, &q.amax}, mean, rstd);
  });
  return q;
}

Tensor Norm::backward(const Tensor& dy, const Tensor& dresid, Activations& saved) {
  ProfileScope prof("norm");
  const Tensor& x = saved.get(key_x_);
  // A fresh dx, never written over dresid: dresid may also be saved (as a Linear's dy) for a deferred W.
  Tensor dx = Tensor::empty(x.shape(), DType::f32);
  const bool layer = kind_ == Kind::layer;
  kernels::norm_backward(kernel_kind(kind_), x, ps_->f32_at(w_offset_, {D_}), layer ? saved.get(key_mean_) : Tensor(),
                         saved.get(key_rstd_), dy, dresid, dx, ps_->grad_at(w_offset_, {D_}),
                         layer ? ps_->grad_at(b_offset_, {D_}) : Tensor());
  if (layer) saved.erase(key_mean_);
  saved.erase(key_x_);
  saved.erase(key_rstd_);
  return dx;
}

}  // namespace tessel::nn
