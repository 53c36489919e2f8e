#include "tessel/core/device.h"

#include <atomic>
#include <cstdlib>

#include "tessel/core/check.h"

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
void set_strict_cpu(bool on) { g_strict.store(on ? 1 : 0, std::memory_order_relaxed); }
bool in_device_access() { return t_access_depth > 0; }
DeviceAccessScope::DeviceAccessScope() { ++t_access_depth; }
DeviceAccessScope::~DeviceAccessScope() { --t_access_depth; }

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
