#pragma once
// The devices a tensor's storage can belong to (docs/architecture.md, "Devices").
//   cpu   host memory from the tensor pool; kernels in kernels/cpu/ (oneDNN, OpenMP, AVX-512/AMX).
//   meta  no memory at all: storage is accounted (bytes by category, as on the CPU) but never
//         allocated, so a model of any size can be set up and measured on one machine. A meta
//         tensor has no data: reading or writing it from host code is an error, not a crash.
// A `cuda` device would be a third entry with its own allocator (core/memory.h) and kernels; the
// strict cpu mode below makes the cpu behave like one for host access.
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

// Strict cpu mode (environment TESSEL_DEVICE=cpu-strict, or set_strict_cpu): host code may touch
// the data of a cpu tensor the allocator owns only inside a DeviceAccessScope, which the cpu branch
// of every kernel dispatch point, the core tensor copies, the collective backends and the explicit
// host <-> device copies (a loss read back, routing copied to the host, token ids uploaded, a
// checkpoint written) open. Any other access, a host loop over device data above `kernels`, is
// refused, naming the tensor: the cpu behaves like a device whose memory the host cannot reach.
// Memory wrapped with Tensor::from_blob is host memory and stays reachable. Strict mode also makes
// the cpu asynchronous, as a GPU is: kernels run on a queue thread in launch order
// (core/device_queue.h), and device memory is kept PROT_NONE while no kernel, explicit copy or
// collective uses it (core/device_arena.h).
bool strict_cpu();  // from TESSEL_DEVICE on first use (cpu or cpu-strict; anything else is an error)
void set_strict_cpu(bool on);
bool in_device_access();  // this thread is inside a DeviceAccessScope

class DeviceMemoryAccess;
// Opened outside the queue (core/device_queue.h) and outermost, it synchronises with the queue
// first (the kernels launched before it have run) and keeps device memory reachable while it lives
// (core/device_arena.h): an explicit copy. Throws the error of a failed kernel, as a synchronisation does.
class DeviceAccessScope {
 public:
  DeviceAccessScope();
  ~DeviceAccessScope();
  DeviceAccessScope(const DeviceAccessScope&) = delete;
  DeviceAccessScope& operator=(const DeviceAccessScope&) = delete;

 private:
  DeviceMemoryAccess* access_ = nullptr;
};

}  // namespace tessel
