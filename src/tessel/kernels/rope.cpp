// The RoPE family's dispatch point: device-neutral checks and the op record, then the device's kernel.
#include "tessel/kernels/rope.h"

#include <memory>

#include "tessel/kernels/launch.h"
#include "tessel/kernels/op_log.h"

namespace tessel::kernels {

void rope(const RopeTable& tab, const Tensor& x, int64_t heads, bool inverse, int64_t pos0, int64_t head_stride) {
  const int64_t Dh = 2 * tab.half, stride = head_stride > 0 ? head_stride : Dh;
  TESSEL_CHECK(x.dim() == 2 && x.dtype() == DType::f32 && x.stride(1) == 1 && heads > 0 && stride >= Dh &&
                   x.size(1) == (heads - 1) * stride + Dh,
               "rope: x must be f32 [rows, {} heads x {} columns, {} apart] with unit column stride, got {}", heads,
               Dh, stride, x.str());
  const Device device = common_device("rope", {&x});
  if (op_log().enabled()) {  // the rotated columns are what is read and written, not those between heads
    const Shape rotated{x.size(0), heads * Dh};
    const int64_t bytes = x.size(0) * heads * Dh * int64_t(sizeof(float));
    op_log().add({"rope", OperandList({rotated, rotated}, {DType::f32, DType::f32}),
                  6.0 * double(x.size(0)) * double(heads) * double(tab.half), bytes, bytes, {}, -1});
  }
  if (device == Device::meta) return;
  // A queued kernel may outlive the caller's table (a model destroyed with kernels in flight): it
  // gets its own copy then. Run at once it reads the caller's.
  const auto owned = cpu_launches_queued() ? std::make_shared<const RopeTable>(tab) : nullptr;
  launch_cpu_kernel(
      [owned, table = owned ? owned.get() : &tab, heads, inverse, pos0, stride](const Tensor& x) {
        (void)owned;  // held for its lifetime
        rope_apply(*table, x.size(0), heads, x.data<float>(), x.stride(0), inverse, pos0, stride);
      },
      x);
}

}  // namespace tessel::kernels
