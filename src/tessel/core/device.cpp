#include "tessel/core/device.h"

#include <atomic>

#include "tessel/core/check.h"

namespace tessel {

namespace {
std::atomic<Device> g_default_device{Device::cpu};
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
