#include "tessel/nn/linear.h"

#include "tessel/core/profiler.h"
#include "tessel/kernels/cast.h"
#include "tessel/kernels/gemm.h"

namespace tessel::nn {

Linear::Linear(ParamStore& ps, std::vector<Part> parts, int64_t in, bool bias, float init_std) : ps_(ps), in_(in) {
  TESSEL_CHECK(!parts.empty(), "Linear needs at least one part");
  for (const auto& p : parts) {
    const int64_t off = ps.add(p.name + ".weight", {p.out, in}, Init::normal, init_std, true);
    if (w_offset_ < 0) w_offset_ = off;
    out_ += p.out;
  }
  if (bias)
    for (const auto& p : parts) {
      const int64_t off = ps.add(p.name + ".bias", {p.out}, Init::zeros, 0.0f, false);
      if (b_offset_ < 0) b_offset_ = off;
    }
  key_x_ = parts[0].name + ".x";
  key_dy_ = parts[0].name + ".dy";
}

Tensor Linear::forward(const Tensor& x, Activations& saved) const {
  TESSEL_CHECK(x.dim() == 2 && x.size(1) == in_, "Linear '{}': input {} does not have {} features", key_x_, x.str(),
               in_);
  const DType cd = ps_.compute_dtype();
  const Tensor xc = x.dtype() == cd ? x : x.to(cd);
  Tensor y = Tensor::empty({x.size(0), out_}, DType::f32);
  {
    ProfileScope ps("gemm_fwd", 2.0 * double(x.size(0)) * double(in_) * double(out_));
    kernels::matmul(xc, false, ps_.compute_at(w_offset_, {out_, in_}), true, y, false,
                    b_offset_ >= 0 ? ps_.params_data() + b_offset_ : nullptr);
  }
  saved.put(key_x_, xc);
  return y;
}

Tensor Linear::backward_input(const Tensor& dy, Activations& saved) const {
  const DType cd = ps_.compute_dtype();
  Tensor dyc = dy;
  if (dy.dtype() != cd) {
    ProfileScope ps("cast");
    dyc = Tensor::empty(dy.shape(), cd);
    kernels::cast_f32_to_bf16(dy.numel(), dy.data<float>(), dyc.data<bf16>());
  }
  Tensor dx = Tensor::empty({dy.size(0), in_}, DType::f32);
  {
    ProfileScope ps("gemm_dgrad", 2.0 * double(dy.size(0)) * double(in_) * double(out_));
    kernels::matmul(dyc, false, ps_.compute_at(w_offset_, {out_, in_}), false, dx, false);
  }
  saved.put(key_dy_, dyc);
  return dx;
}

void Linear::backward_weight(Activations& saved) const {
  const Tensor& x = saved.get(key_x_);
  const Tensor& dy = saved.get(key_dy_);
  {
    ProfileScope ps("gemm_wgrad", 2.0 * double(dy.size(0)) * double(in_) * double(out_));
    kernels::matmul(dy, true, x, false, ps_.grad_at(w_offset_, {out_, in_}), true);
  }
  if (b_offset_ >= 0) {
    ProfileScope ps("bias_grad");
    float* db = ps_.grads_data() + b_offset_;
    if (dy.dtype() == DType::f32)
      kernels::column_sum_accumulate(dy.size(0), out_, dy.data<float>(), db);
    else
      kernels::column_sum_accumulate(dy.size(0), out_, dy.data<bf16>(), db);
  }
  saved.erase(key_x_);
  saved.erase(key_dy_);
}

}  // namespace tessel::nn
