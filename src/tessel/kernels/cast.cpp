// The cast family's dispatch points (casts, adds, row and column sums): device-neutral checks and the
// op record, then the device's kernel.
#include "tessel/kernels/cast.h"

#include "tessel/kernels/launch.h"
#include "tessel/kernels/op_log.h"

namespace tessel::kernels {

namespace {

void check_contiguous(const char* op, const Tensor& t, std::initializer_list<DType> dtypes, const char* what) {
  bool ok = false;
  for (DType d : dtypes) ok = ok || t.dtype() == d;
  TESSEL_CHECK(ok && t.is_contiguous(), "{}: {} must be contiguous {}, got {}", op, what,
               dtypes.size() == 1 ? "f32" : "f32 or bf16", t.str());
}

}  // namespace

void cast(const Tensor& src, const Tensor& dst) {
  TESSEL_CHECK(src.shape() == dst.shape(), "cast: {} into {}", src.str(), dst.str());
  const bool down = src.dtype() == DType::f32 && dst.dtype() == DType::bf16;
  const bool up = src.dtype() == DType::bf16 && dst.dtype() == DType::f32;
  TESSEL_CHECK((down || up) && src.is_contiguous() && dst.is_contiguous(),
               "cast: contiguous f32 to bf16 or bf16 to f32 only, got {} into {}", src.str(), dst.str());
  const Device device = common_device("cast", {&src, &dst});
  record_op("cast", {&src}, {&dst}, 0.0);
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [=](const Tensor& src, const Tensor& dst) {
      if (down)
        cast_f32_to_bf16(src.numel(), src.data<float>(), dst.data<bf16>());
      else
        cast_bf16_to_f32(src.numel(), src.data<bf16>(), dst.data<float>());
      },
      src, dst);
}

void add(const Tensor& a, const Tensor& b, const Tensor& out) {
  for (const Tensor* t : {&a, &b, &out}) check_contiguous("add", *t, {DType::f32}, "every operand");
  TESSEL_CHECK(a.shape() == b.shape() && a.shape() == out.shape(), "add: shapes {}, {} -> {}", a.str(), b.str(),
               out.str());
  const Device device = common_device("add", {&a, &b, &out});
  record_op("add", {&a, &b}, {&out}, double(a.numel()));
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [=](const Tensor& a, const Tensor& b, const Tensor& out) {
      add(a.numel(), a.data<float>(), b.data<float>(), out.data<float>());
      },
      a, b, out);
}

void add_row_vector(const Tensor& y, const Tensor& v) {
  check_contiguous("add_row_vector", y, {DType::f32}, "the rows");
  check_contiguous("add_row_vector", v, {DType::f32}, "the vector");
  TESSEL_CHECK(y.dim() == 2 && v.numel() == y.size(1), "add_row_vector: {} rows of width {}, vector {}", y.str(),
               y.dim() == 2 ? y.size(1) : 0, v.str());
  const Device device = common_device("add_row_vector", {&y, &v});
  record_op("add_row_vector", {&y, &v}, {&y}, double(y.numel()));
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [=](const Tensor& y, const Tensor& v) {
      add_row_vector(y.size(0), y.size(1), v.data<float>(), y.data<float>());
      },
      y, v);
}

void column_sum_accumulate(const Tensor& x, const Tensor& out) {
  check_contiguous("column_sum_accumulate", x, {DType::f32, DType::bf16}, "the rows");
  check_contiguous("column_sum_accumulate", out, {DType::f32}, "the sums");
  TESSEL_CHECK(x.dim() == 2 && out.numel() == x.size(1), "column_sum_accumulate: {} rows into {}", x.str(), out.str());
  const Device device = common_device("column_sum_accumulate", {&x, &out});
  record_op("column_sum_accumulate", {&x, &out}, {&out}, double(x.numel()));
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [=](const Tensor& x, const Tensor& out) {
      if (x.dtype() == DType::f32)
        column_sum_accumulate(x.size(0), x.size(1), x.data<float>(), out.data<float>());
      else
        column_sum_accumulate(x.size(0), x.size(1), x.data<bf16>(), out.data<float>());
      },
      x, out);
}

}  // namespace tessel::kernels
