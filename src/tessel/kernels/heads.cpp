// The head-columns family's dispatch points: device-neutral checks and the op record, then the
// device's kernel.
#include "tessel/kernels/heads.h"

#include "tessel/kernels/launch.h"
#include "tessel/kernels/op_log.h"

namespace tessel::kernels {

namespace {

// Every block [h * stride + col, + width) of every head must lie inside the tensor's columns.
void check_blocks(const char* op, const Tensor& t, int64_t stride, int64_t col, int64_t width, int64_t heads,
                  const char* what) {
  TESSEL_CHECK(t.dim() == 2 && t.is_contiguous(), "{}: {} must be a contiguous 2-D tensor, got {}", op, what, t.str());
  TESSEL_CHECK(stride >= 0 && col >= 0 && width >= 0 && heads > 0 && (heads - 1) * stride + col + width <= t.size(1),
               "{}: {} heads of {} columns at {} (head stride {}) do not fit {} {}", op, heads, width, col, stride,
               what, t.str());
}

}  // namespace

void copy_head_columns(const Tensor& src, int64_t src_stride, int64_t src_col, const Tensor& dst, int64_t dst_stride,
                       int64_t dst_col, int64_t width, int64_t heads) {
  const char* op = "copy_head_columns";
  check_blocks(op, src, src_stride, src_col, width, heads, "the source");
  check_blocks(op, dst, dst_stride, dst_col, width, heads, "the destination");
  TESSEL_CHECK(src.size(0) == dst.size(0) && src.dtype() == dst.dtype(), "{}: {} into {}", op, src.str(), dst.str());
  const Device device = common_device(op, {&src, &dst});
  if (op_log().enabled()) {  // moves rows x heads x width elements
    const int64_t moved = src.size(0) * heads * width * int64_t(dtype_size(src.dtype()));
    op_log().add({op, {{src.shape(), dst.shape()}, {src.dtype(), dst.dtype()}}, 0.0, moved, moved});
  }
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [=](const Tensor& src, const Tensor& dst) {
      copy_head_columns(src.size(0), dtype_size(src.dtype()), src.raw(), src.size(1), src_stride, src_col, dst.raw(),
                        dst.size(1), dst_stride, dst_col, width, heads);
      },
      src, dst);
}

void sum_head_columns(const Tensor& src, int64_t src_stride, int64_t src_col, const Tensor& dst, int64_t width,
                      int64_t heads) {
  const char* op = "sum_head_columns";
  check_blocks(op, src, src_stride, src_col, width, heads, "the source");
  TESSEL_CHECK(src.dtype() == DType::f32 && dst.dtype() == DType::f32 && dst.is_contiguous() &&
                   dst.shape() == Shape({src.size(0), width}),
               "{}: f32 {} into f32 [{}, {}], got {}", op, src.str(), src.size(0), width, dst.str());
  const Device device = common_device(op, {&src, &dst});
  if (op_log().enabled()) {
    const int64_t summed = src.size(0) * heads * width;
    op_log().add({op, {{src.shape(), dst.shape()}, {src.dtype(), dst.dtype()}}, double(summed),
                  summed * 4 + int64_t(dst.nbytes()), int64_t(dst.nbytes())});
  }
  if (device == Device::meta) return;
  launch_cpu_kernel(
      [=](const Tensor& src, const Tensor& dst) {
      sum_head_columns(src.size(0), src.data<float>(), src.size(1), src_stride, src_col, dst.data<float>(), width, heads);
      },
      src, dst);
}

}  // namespace tessel::kernels
