// The optimizer family's dispatch points: device-neutral checks and the op record, then the device's kernel.
#include "tessel/kernels/adamw.h"

#include "tessel/kernels/launch.h"
#include "tessel/kernels/op_log.h"

namespace tessel::kernels {

namespace {
void check_flat(const char* op, const Tensor& t, DType d, int64_t n, const char* what) {
  TESSEL_CHECK(t.dtype() == d && t.is_contiguous() && t.numel() == n, "{}: {} must be {} contiguous {}, got {}", op,
               what, n, dtype_name(d), t.str());
}
}  // namespace

void adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const AdamWHyper& h,
                  float grad_scale, const Tensor& compute_copy) {
  const int64_t n = p.numel();
  check_flat("adamw_update", p, DType::f32, n, "the parameters");
  check_flat("adamw_update", g, DType::f32, n, "the gradients");
  check_flat("adamw_update", m, DType::f32, n, "the first moments");
  check_flat("adamw_update", v, DType::f32, n, "the second moments");
  if (compute_copy.defined()) check_flat("adamw_update", compute_copy, DType::bf16, n, "the compute copy");
  const Device device = common_device("adamw_update", {&p, &g, &m, &v, &compute_copy});
  // About a dozen arithmetic operations per element (decay, two moments, bias corrections, sqrt, divide).
  record_op("adamw_update", {&p, &g, &m, &v}, {&p, &m, &v, &compute_copy}, 12.0 * double(n));
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [=](const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& compute_copy) {
      adamw_update(n, p.data<float>(), g.data<float>(), m.data<float>(), v.data<float>(), h, grad_scale,
                   compute_copy.defined() ? compute_copy.data<bf16>() : nullptr);
      },
      p, g, m, v, compute_copy);
}

double sum_squares(const Tensor& x) {
  check_flat("sum_squares", x, DType::f32, x.numel(), "the input");
  const Device device = common_device("sum_squares", {&x});
  record_op("sum_squares", {&x}, {}, 2.0 * double(x.numel()));
  if (device == Device::meta) return 0.0;
  return run_cpu_kernel_now([&] { return sum_squares(x.numel(), x.data<float>()); });
}

}  // namespace tessel::kernels
