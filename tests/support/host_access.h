#pragma once
// Test code is host code. In strict cpu mode (TESSEL_DEVICE=cpu-strict, core/device.h) it reaches
// device memory only as the host code of a GPU backend would, through an explicit copy. HostAccess
// is one: it waits for the kernels launched before it, and while it lives the test reads and writes
// tensors in place (kernels launched inside it run at once). Outside strict mode it costs nothing.
// A test opens it where it inspects or fills tensors, not around the library calls it checks, so
// that those stay under strict mode's eye.
#include <cstdint>
#include <vector>

#include "tessel/core/tensor.h"

namespace tessel::testing {

using HostAccess = DeviceAccessScope;

// Element i of a contiguous tensor, copied to the host.
template <class T = float>
T host_at(const Tensor& t, int64_t i) {
  const HostAccess host;
  return t.data<T>()[i];
}

// A contiguous tensor's elements, copied to the host.
template <class T = float>
std::vector<T> host_copy(const Tensor& t) {
  const HostAccess host;
  const T* p = t.data<T>();
  return std::vector<T>(p, p + t.numel());
}

}  // namespace tessel::testing
