#pragma once
// How a dispatch point runs its cpu kernel: `body(views...)` on the device, the views being the
// tensors' borrowed views (Tensor::borrow). In strict mode (core/device.h) the body is launched on
// the cpu queue (core/device_queue.h) and may run after the dispatch point has returned, so it
// captures only values ([=] over scalars and host vectors, never a pointer into host memory that
// may change) and reaches tensors only through its parameters. A kernel given host memory (a
// from_blob tensor) runs before the call returns, as a copy from pageable memory does on a GPU.
#include <chrono>
#include <utility>

#include "tessel/core/device_queue.h"
#include "tessel/kernels/op_log.h"
#include "tessel/core/tensor.h"

namespace tessel::kernels {

template <class F, class... T>
void launch_cpu_kernel(F&& body, const T&... tensors) {
  if (!cpu_launches_queued() || (tensors.is_host_memory() || ...)) {
    const DeviceAccessScope on_device;
    if (!op_log().timing()) {
      body(tensors...);
      return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    body(tensors...);
    op_log().set_seconds_of_last(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return;
  }
  launch_on_cpu([body = std::forward<F>(body), ... views = tensors.borrow()]() mutable { body(views...); });
}

}  // namespace tessel::kernels
