// The activation family's dispatch point: device-neutral checks and the op record, then the device's kernel.
#include "tessel/kernels/act.h"

#include "tessel/kernels/launch.h"
#include "tessel/kernels/op_log.h"

namespace tessel::kernels {

namespace {

// The width F of the activation's output for an input of `in`'s shape (SwiGLU halves the columns).
int64_t output_width(Activation kind, const Tensor& in, const char* op) {
  TESSEL_CHECK(in.dim() == 2 && in.dtype() == DType::f32 && in.is_contiguous(), "{}: input must be a contiguous f32 "
               "[N, width], got {}", op, in.str());
  if (kind == Activation::gelu) return in.size(1);
  TESSEL_CHECK(in.size(1) % 2 == 0, "{}: the input holds gate then up columns, so its width must be even, got {}", op,
               in.str());
  return in.size(1) / 2;
}

void check_output(const char* op, const Tensor& t, int64_t N, int64_t F, const char* what) {
  TESSEL_CHECK((t.dtype() == DType::f32 || t.dtype() == DType::bf16) && t.dim() == 2 && t.size(0) == N &&
                   t.size(1) == F && t.is_contiguous(),
               "{}: {} must be a contiguous f32 or bf16 [{}, {}], got {}", op, what, N, F, t.str());
}

}  // namespace

void activation_forward(Activation kind, const Tensor& in, const Tensor& out) {
  const char* op = kind == Activation::swiglu ? "swiglu_fwd" : "gelu_fwd";
  const int64_t N = in.dim() == 2 ? in.size(0) : 0, F = output_width(kind, in, op);
  check_output(op, out, N, F, "output");
  const Device device = common_device(op, {&in, &out});
  // SwiGLU: sigmoid (about 4), two multiplies; GeLU (tanh form): about 8 per element.
  record_op(op, {&in}, {&out}, double(N) * double(F) * (kind == Activation::swiglu ? 6 : 8));
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [=](const Tensor& in, const Tensor& out) {
      const auto run = [&](auto* o) {
        if (kind == Activation::swiglu)
          swiglu_fwd(N, F, in.data<float>(), o);
        else
          gelu_fwd(N * F, in.data<float>(), o);
      };
      if (out.dtype() == DType::bf16)
        run(out.data<bf16>());
      else
        run(out.data<float>());
      },
      in, out);
}

void activation_backward(Activation kind, const Tensor& in, const Tensor& dout, const Tensor& din) {
  const char* op = kind == Activation::swiglu ? "swiglu_bwd" : "gelu_bwd";
  const int64_t N = in.dim() == 2 ? in.size(0) : 0, F = output_width(kind, in, op);
  TESSEL_CHECK(dout.dtype() == DType::f32 && dout.dim() == 2 && dout.size(0) == N && dout.size(1) == F &&
                   dout.is_contiguous(),
               "{}: dout must be a contiguous f32 [{}, {}], got {}", op, N, F, dout.str());
  check_output(op, din, N, in.size(1), "input gradient");
  const Device device = common_device(op, {&in, &dout, &din});
  record_op(op, {&in, &dout}, {&din}, double(N) * double(F) * (kind == Activation::swiglu ? 10 : 12));
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [=](const Tensor& in, const Tensor& dout, const Tensor& din) {
      const auto run = [&](auto* g) {
        if (kind == Activation::swiglu)
          swiglu_bwd(N, F, in.data<float>(), dout.data<float>(), g);
        else
          gelu_bwd(N * F, in.data<float>(), dout.data<float>(), g);
      };
      if (din.dtype() == DType::bf16)
        run(din.data<bf16>());
      else
        run(din.data<float>());
      },
      in, dout, din);
}

}  // namespace tessel::kernels
