// The norm family's dispatch point: device-neutral checks and the op record, then the device's kernel.
#include "tessel/kernels/norm.h"

#include "tessel/kernels/launch.h"
#include "tessel/kernels/op_log.h"

namespace tessel::kernels {

namespace {

const float* f32_or_null(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

void check_rows(const char* op, const Tensor& t, int64_t N, int64_t D, const char* what) {
  TESSEL_CHECK(t.dtype() == DType::f32 && t.dim() == 2 && t.size(0) == N && t.size(1) == D && t.is_contiguous(),
               "{}: {} must be a contiguous f32 [{}, {}], got {}", op, what, N, D, t.str());
}

void check_vector(const char* op, const Tensor& t, int64_t n, const char* what) {
  TESSEL_CHECK(t.dtype() == DType::f32 && t.numel() == n && t.is_contiguous(), "{}: {} must be a contiguous f32 [{}], got {}",
               op, what, n, t.str());
}

}  // namespace

void norm_forward(NormKind kind, const Tensor& r_in, const Tensor& delta, const Tensor& r_out, const Tensor& w,
                  const Tensor& b, float eps, const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  const char* op = kind == NormKind::rms ? "rmsnorm_fwd" : "layernorm_fwd";
  TESSEL_CHECK(r_in.dim() == 2, "{}: input must be [N, D], got {}", op, r_in.str());
  const int64_t N = r_in.size(0), D = r_in.size(1);
  check_rows(op, r_in, N, D, "input");
  if (delta.defined()) check_rows(op, delta, N, D, "delta");
  check_rows(op, r_out, N, D, "r_out");
  check_vector(op, w, D, "weight");
  check_vector(op, rstd, N, "rstd");
  const bool layer = kind == NormKind::layer;
  TESSEL_CHECK(layer == b.defined() && layer == mean.defined(), "{}: bias and mean are for LayerNorm only", op);
  if (layer) {
    check_vector(op, b, D, "bias");
    check_vector(op, mean, N, "mean");
  }
  TESSEL_CHECK((y.dtype() == DType::f32 || y.dtype() == DType::bf16) && y.shape() == r_in.shape() && y.is_contiguous(),
               "{}: output must be a contiguous f32 or bf16 [{}, {}], got {}", op, N, D, y.str());
  const Device device = common_device(op, {&r_in, &delta, &r_out, &w, &b, &y, &mean, &rstd});
  // Per element: the residual add, the square and sum (mean and variance), the scale by rstd and w (+ b).
  const double flops = double(N) * double(D) * ((delta.defined() ? 1 : 0) + (layer ? 7 : 4));
  record_op(op, {&r_in, &delta, &w, &b}, {delta.defined() ? &r_out : &delta, &y, &mean, &rstd}, flops);
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [=](const Tensor& r_in, const Tensor& delta, const Tensor& r_out, const Tensor& w, const Tensor& b, const Tensor& y, const Tensor& mean, const Tensor& rstd) {
      const auto run = [&](auto* out) {
        if (layer)
          layernorm_fwd(N, D, r_in.data<float>(), f32_or_null(delta), r_out.data<float>(), w.data<float>(), b.data<float>(), eps,
                        out, mean.data<float>(), rstd.data<float>());
        else
          rmsnorm_fwd(N, D, r_in.data<float>(), f32_or_null(delta), r_out.data<float>(), w.data<float>(), eps, out,
                      rstd.data<float>());
      };
      if (y.dtype() == DType::bf16)
        run(y.data<bf16>());
      else
        run(y.data<float>());
      },
      r_in, delta, r_out, w, b, y, mean, rstd);
}

void norm_backward(NormKind kind, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                   const Tensor& dy, const Tensor& dresid, const Tensor& dx, const Tensor& dw, const Tensor& db) {
  const char* op = kind == NormKind::rms ? "rmsnorm_bwd" : "layernorm_bwd";
  TESSEL_CHECK(x.dim() == 2, "{}: input must be [N, D], got {}", op, x.str());
  const int64_t N = x.size(0), D = x.size(1);
  check_rows(op, x, N, D, "input");
  check_rows(op, dy, N, D, "dy");
  check_rows(op, dx, N, D, "dx");
  if (dresid.defined()) check_rows(op, dresid, N, D, "dresid");
  check_vector(op, w, D, "weight");
  check_vector(op, dw, D, "weight gradient");
  check_vector(op, rstd, N, "rstd");
  const bool layer = kind == NormKind::layer;
  TESSEL_CHECK(layer == mean.defined() && layer == db.defined(), "{}: mean and the bias gradient are for LayerNorm only",
               op);
  const Device device = common_device(op, {&x, &w, &mean, &rstd, &dy, &dresid, &dx, &dw, &db});
  const double flops = double(N) * double(D) * (layer ? 12 : 9);
  record_op(op, {&x, &w, &mean, &rstd, &dy, &dresid, &dw, &db}, {&dx, &dw, &db}, flops);
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [=](const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd, const Tensor& dy, const Tensor& dresid, const Tensor& dx, const Tensor& dw, const Tensor& db) {
      if (layer)
        layernorm_bwd(N, D, x.data<float>(), w.data<float>(), mean.data<float>(), rstd.data<float>(), dy.data<float>(),
                      f32_or_null(dresid), dx.data<float>(), dw.data<float>(), db.data<float>());
      else
        rmsnorm_bwd(N, D, x.data<float>(), w.data<float>(), rstd.data<float>(), dy.data<float>(), f32_or_null(dresid),
                    dx.data<float>(), dw.data<float>());
      },
      x, w, mean, rstd, dy, dresid, dx, dw, db);
}

}  // namespace tessel::kernels
