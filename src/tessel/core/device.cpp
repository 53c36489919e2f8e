#include "tessel/core/device.h"

#include <atomic>
#include <cstdlib>

#include "tessel/core/check.h"
#include "tessel/core/device_arena.h"
#include "tessel/core/device_queue.h"

namespace tessel {

namespace {
std::atomic<Device> g_default_device{Device::cpu};

// -1: not read from the environment yet; 0 / 1: off / on.
std::atomic<int> g_strict{-1};
thread_local int t_access_depth = 0;

int strict_from_environment() {
  const char* v = std::getenv("TESSEL_DEVICE");
  if (!v || std::string_view(v).empty() || std::string_view(v) == "cpu") return 0;
  if (std::string_view(v) == "cpu-strict") return 1;
  TESSEL_FAIL("TESSEL_DEVICE='{}' is not a device mode (allowed: cpu, cpu-strict)", v);
}
}  // namespace

bool strict_cpu() {
  int s = g_strict.load(std::memory_order_relaxed);
  if (s < 0) {
    s = strict_from_environment();
    g_strict.store(s, std::memory_order_relaxed);
  }
  return s == 1;
}
void set_strict_cpu(bool on) {
  if (!on && strict_cpu()) synchronize_cpu();  // what was launched on the queue finishes there
  g_strict.store(on ? 1 : 0, std::memory_order_relaxed);
  if (on || DeviceArena::exists()) DeviceArena::instance().set_enforcing(on);
}
bool in_device_access() { return t_access_depth > 0; }

DeviceAccessScope::DeviceAccessScope() {
  // The outermost scope of a host thread is an explicit copy: what the queue was asked to compute
  // before it must be there (a synchronisation), and device memory must be reachable.
  if (t_access_depth == 0 && strict_cpu() && !on_cpu_queue()) {
    synchronize_cpu();
    access_ = new DeviceMemoryAccess;
  }
  ++t_access_depth;
}
DeviceAccessScope::~DeviceAccessScope() {
  --t_access_depth;
  delete access_;
}

std::string_view device_name(Device d) {
  switch (d) {
    case Device::cpu: return "cpu";
    case Device::meta: return "meta";
  }
  return "?";
}

Device parse_device(std::string_view name) {
  if (name == "cpu") return Device::cpu;
  if (name == "meta") return Device::meta;
  TESSEL_FAIL("unknown device '{}' (allowed: cpu, meta)", name);
}

Device default_device() { return g_default_device.load(std::memory_order_relaxed); }
void set_default_device(Device d) { g_default_device.store(d, std::memory_order_relaxed); }

}  // namespace tessel
