// The FP8 quantisation family's dispatch points: device-neutral checks and the op record, then the
// device's kernel.
#include "tessel/kernels/fp8_quantize.h"

#include "tessel/kernels/fp8.h"
#include "tessel/kernels/launch.h"
#include "tessel/kernels/op_log.h"

namespace tessel::kernels {

namespace {

void check_source(const char* op, const Tensor& x) {
  TESSEL_CHECK(x.dim() == 2 && x.is_contiguous() && (x.dtype() == DType::f32 || x.dtype() == DType::bf16),
               "{}: the source must be a contiguous f32 or bf16 [R, C], got {}", op, x.str());
}

void check_codes(const char* op, const Fp8Tensor& q, const Shape& shape, const Shape& scales) {
  TESSEL_CHECK((q.format() == DType::e4m3 || q.format() == DType::e5m2) && q.data.is_contiguous() &&
                   q.data.shape() == shape && q.scale_inv.dtype() == DType::f32 && q.scale_inv.is_contiguous() &&
                   q.scale_inv.shape() == scales,
               "{}: codes must be e4m3 or e5m2 {} with f32 scales {}, got {} and {}", op, shape_str(shape),
               shape_str(scales), q.data.str(), q.scale_inv.str());
}

int64_t tiles(int64_t n) { return (n + kFp8Tile - 1) / kFp8Tile; }

// A pass over x computing a scale per element group and the codes: about 3 operations per element.
double quantize_flops(const Tensor& x) { return 3.0 * double(x.numel()); }

}  // namespace

float amax(const Tensor& x) {
  TESSEL_CHECK(x.is_contiguous() && (x.dtype() == DType::f32 || x.dtype() == DType::bf16),
               "amax: a contiguous f32 or bf16 tensor, got {}", x.str());
  const Device device = common_device("amax", {&x});
  record_op("amax", {&x}, {}, double(x.numel()));
  if (device == Device::meta) return 0.0f;
  return run_cpu_kernel_now([&] {
    float a = 0;
    with_elements(x, [&](const auto* p) { a = amax(x.numel(), p); });
    return a;
  });
}

float read_scalar(const Tensor& x) {
  TESSEL_CHECK(x.numel() == 1 && x.dtype() == DType::f32, "read_scalar: a one-element f32 tensor, got {}", x.str());
  if (x.is_meta()) return 0.0f;
  const DeviceAccessScope copy_to_host;
  return x.data<float>()[0];
}

void fp8_quantize(const Tensor& x, float scale, const Fp8Tensor& q) {
  const char* op = "fp8_quantize";
  TESSEL_CHECK(x.is_contiguous() && (x.dtype() == DType::f32 || x.dtype() == DType::bf16),
               "{}: a contiguous f32 or bf16 source, got {}", op, x.str());
  check_codes(op, q, x.shape(), {1});
  const Device device = common_device(op, {&x, &q.data, &q.scale_inv});
  record_op(op, {&x}, {&q.data, &q.scale_inv}, 2.0 * double(x.numel()));
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [scale](const Tensor& x, const Tensor& codes, const Tensor& scale_inv) {
        with_elements(x, [&](const auto* p) {
          fp8_quantize(x.numel(), p, scale, codes.dtype(), static_cast<uint8_t*>(codes.raw()));
        });
        scale_inv.data<float>()[0] = 1.0f / scale;
      },
      x, q.data, q.scale_inv);
}

void fp8_quantize_row_tiles(const Tensor& x, const Fp8Tensor& q) {
  const char* op = "fp8_quantize_row_tiles";
  check_source(op, x);
  const int64_t R = x.size(0), C = x.size(1);
  check_codes(op, q, {R, C}, {R, tiles(C)});
  const Device device = common_device(op, {&x, &q.data, &q.scale_inv});
  record_op(op, {&x}, {&q.data, &q.scale_inv}, quantize_flops(x));
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [R, C](const Tensor& x, const Tensor& codes, const Tensor& scale_inv) {
        with_elements(x, [&](const auto* p) {
          fp8_quantize_row_tiles(R, C, p, C, codes.dtype(), true, static_cast<uint8_t*>(codes.raw()),
                                 scale_inv.data<float>());
        });
      },
      x, q.data, q.scale_inv);
}

void fp8_quantize_col_tiles_transposed(const Tensor& x, const Fp8Tensor& q) {
  const char* op = "fp8_quantize_col_tiles_transposed";
  check_source(op, x);
  const int64_t R = x.size(0), C = x.size(1);
  check_codes(op, q, {C, R}, {C, tiles(R)});
  const Device device = common_device(op, {&x, &q.data, &q.scale_inv});
  record_op(op, {&x}, {&q.data, &q.scale_inv}, quantize_flops(x));
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [R, C](const Tensor& x, const Tensor& codes, const Tensor& scale_inv) {
        with_elements(x, [&](const auto* p) {
          fp8_quantize_col_tiles_transposed(R, C, p, C, codes.dtype(), true, static_cast<uint8_t*>(codes.raw()),
                                            scale_inv.data<float>());
        });
      },
      x, q.data, q.scale_inv);
}

void fp8_quantize_blocks(const Tensor& w, const Fp8Tensor& q) {
  const char* op = "fp8_quantize_blocks";
  check_source(op, w);
  const int64_t R = w.size(0), C = w.size(1);
  check_codes(op, q, {R, C}, {tiles(R), tiles(C)});
  const Device device = common_device(op, {&w, &q.data, &q.scale_inv});
  record_op(op, {&w}, {&q.data, &q.scale_inv}, quantize_flops(w));
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [R, C](const Tensor& w, const Tensor& codes, const Tensor& scale_inv) {
        with_elements(w, [&](const auto* p) {
          fp8_quantize_blocks(R, C, p, codes.dtype(), true, static_cast<uint8_t*>(codes.raw()), scale_inv.data<float>());
        });
      },
      w, q.data, q.scale_inv);
}

void norm_forward_fp8(NormKind kind, const Tensor& r_in, const Tensor& delta, const Tensor& r_out, const Tensor& w,
                      const Tensor& b, float eps, const Fp8Out& y, std::initializer_list<const Tensor*> y_tensors,
                      const Tensor& mean, const Tensor& rstd) {
  const char* op = kind == NormKind::rms ? "rmsnorm_fwd_fp8" : "layernorm_fwd_fp8";
  TESSEL_CHECK(r_in.dim() == 2 && r_in.dtype() == DType::f32 && r_in.is_contiguous() && r_out.shape() == r_in.shape() &&
                   w.numel() == r_in.size(1) && rstd.numel() == r_in.size(0) &&
                   (kind == NormKind::rms || (b.numel() == r_in.size(1) && mean.numel() == r_in.size(0))),
               "{}: residual f32 [N, D] {}, weight {}, statistics {}", op, r_in.str(), w.str(), rstd.str());
  const Device device = common_device(op, {&r_in, &delta, &r_out, &w, &b, &mean, &rstd});
  for (const Tensor* t : y_tensors)
    TESSEL_CHECK(!t->defined() || t->device() == device, "{}: its FP8 output {} is on another device", op, t->str());
  if (op_log().enabled()) {
    OpRecord r{op, {{r_in.shape(), w.shape()}, {r_in.dtype(), w.dtype()}}, 8.0 * double(r_in.numel()),
               int64_t(r_in.nbytes() * (delta.defined() ? 2 : 1) + w.nbytes()), 0};
    for (const Tensor* t : y_tensors) r.bytes_written += t->defined() ? int64_t(t->nbytes()) : 0;
    r.bytes_written += int64_t(rstd.nbytes() + (delta.defined() ? r_out.nbytes() : 0));
    op_log().add(std::move(r));
  }
  if (device == Device::meta) return;
  run_cpu_kernel_now([&] {
    const float* d = delta.defined() ? delta.data<float>() : nullptr;
    if (kind == NormKind::rms)
      rmsnorm_fwd_fp8(r_in.size(0), r_in.size(1), r_in.data<float>(), d, r_out.data<float>(), w.data<float>(), eps, y,
                      rstd.data<float>());
    else
      layernorm_fwd_fp8(r_in.size(0), r_in.size(1), r_in.data<float>(), d, r_out.data<float>(), w.data<float>(),
                        b.data<float>(), eps, y, mean.data<float>(), rstd.data<float>());
  });
}

void activation_forward_fp8(bool swiglu, const Tensor& x, int64_t F, const Fp8Out& out,
                            std::initializer_list<const Tensor*> out_tensors) {
  const char* op = swiglu ? "swiglu_fwd_fp8" : "gelu_fwd_fp8";
  TESSEL_CHECK(x.dim() == 2 && x.dtype() == DType::f32 && x.is_contiguous() && x.size(1) == (swiglu ? 2 * F : F),
               "{}: input f32 [N, {}], got {}", op, swiglu ? 2 * F : F, x.str());
  const Device device = common_device(op, {&x});
  for (const Tensor* t : out_tensors)
    TESSEL_CHECK(!t->defined() || t->device() == device, "{}: its FP8 output {} is on another device", op, t->str());
  if (op_log().enabled()) {
    OpRecord r{op, {{x.shape()}, {x.dtype()}}, 8.0 * double(x.size(0) * F), int64_t(x.nbytes()), 0};
    for (const Tensor* t : out_tensors) r.bytes_written += t->defined() ? int64_t(t->nbytes()) : 0;
    op_log().add(std::move(r));
  }
  if (device == Device::meta) return;
  run_cpu_kernel_now([&] {
    if (swiglu)
      swiglu_fwd_fp8(x.size(0), F, x.data<float>(), out);
    else
      gelu_fwd_fp8(x.size(0), F, x.data<float>(), out);
  });
}

}  // namespace tessel::kernels
