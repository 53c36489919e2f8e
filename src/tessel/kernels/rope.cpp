// The RoPE family's dispatch point: device-neutral checks and the op record, then the device's kernel.
#include "tessel/kernels/rope.h"

#include <memory>

#include "tessel/kernels/launch.h"
#include "tessel/kernels/op_log.h"

namespace tessel::kernels {

void rope(const RopeTable& tab, const Tensor& x, int64_t heads, bool inverse, int64_t pos0) {
  TESSEL_CHECK(x.dim() == 2 && x.dtype() == DType::f32 && x.stride(1) == 1 && heads > 0 &&
                   x.size(1) == heads * 2 * tab.half,
               "rope: x must be f32 [rows, {} heads x {}] with unit column stride, got {}", heads, 2 * tab.half, x.str());
  const Device device = common_device("rope", {&x});
  record_op("rope", {&x}, {&x}, 6.0 * double(x.size(0)) * double(heads) * double(tab.half));
  if (device == Device::meta) return;
  // A queued kernel may outlive the caller's table (a model destroyed with kernels in flight): it
  // gets its own copy then. Run at once it reads the caller's.
  const auto owned = cpu_launches_queued() ? std::make_shared<const RopeTable>(tab) : nullptr;
  launch_cpu_kernel(
      [owned, table = owned ? owned.get() : &tab, heads, inverse, pos0](const Tensor& x) {
        (void)owned;  // held for its lifetime
        rope_apply(*table, x.size(0), heads, x.data<float>(), x.stride(0), inverse, pos0);
      },
      x);
}

}  // namespace tessel::kernels
