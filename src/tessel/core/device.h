#pragma once
// The devices a tensor's storage can belong to (docs/architecture.md, "Devices").
//   cpu   host memory from the tensor pool; kernels in kernels/cpu/ (oneDNN, OpenMP, AVX-512/AMX).
//   meta  no memory at all: storage is accounted (bytes by category, as on the CPU) but never
//         allocated, so a model of any size can be set up and measured on one machine. A meta
//         tensor has no data: reading or writing it from host code is an error, not a crash.
// A `cuda` device would be a third entry with its own allocator (core/memory.h) and kernels.
#include <cstdint>
#include <string>
#include <string_view>

namespace tessel {

enum class Device : uint8_t { cpu, meta };

std::string_view device_name(Device d);
// "cpu" or "meta"; anything else is refused with the allowed names.
Device parse_device(std::string_view name);

// The device Tensor::empty and Tensor::zeros allocate on when none is named: process-wide, cpu
// unless set. A dry run sets meta before it builds the model.
Device default_device();
void set_default_device(Device d);

// Sets the default device for the lifetime of the scope and restores the previous one.
class DefaultDeviceScope {
 public:
  explicit DefaultDeviceScope(Device d) : previous_(default_device()) { set_default_device(d); }
  ~DefaultDeviceScope() { set_default_device(previous_); }
  DefaultDeviceScope(const DefaultDeviceScope&) = delete;
  DefaultDeviceScope& operator=(const DefaultDeviceScope&) = delete;

 private:
  Device previous_;
};

}  // namespace tessel
