#pragma once
// How a dispatch point runs its cpu kernel: `body(views...)` on the device, the views being the
// tensors' borrowed views (Tensor::borrow). In strict mode (core/device.h) the body is launched on
// the cpu queue (core/device_queue.h) and may run after the dispatch point has returned, so it
// captures only values ([=] over scalars and host vectors, never a pointer into host memory that
// may change) and reaches tensors only through its parameters. A kernel given host memory (a
// from_blob tensor) runs before the call returns, as a copy from pageable memory does on a GPU.
#include <chrono>
#include <type_traits>
#include <utility>

#include "tessel/core/device_queue.h"
#include "tessel/kernels/op_log.h"
#include "tessel/core/tensor.h"

namespace tessel::kernels {

// fn(const T*) with x's elements, T = bf16 or float: a kernel templated over its input's dtype.
template <class Fn>
void with_elements(const Tensor& x, Fn&& fn) {
  if (x.dtype() == DType::bf16)
    fn(x.data<bf16>());
  else
    fn(x.data<float>());
}

// A kernel whose result the host reads as it returns (a loss, a norm, an amax, a count), and every
// kernel that runs where it is launched: it runs before the call returns, in strict mode after the
// queue has drained, and is timed when the op log times kernels (`tessel plan calibrate` fits each
// op family's cost from that time).
template <class F>
auto run_cpu_kernel_now(F&& body) {
  const DeviceAccessScope on_device;
  if (!op_log().timing()) return body();
  const auto t0 = std::chrono::steady_clock::now();
  const auto note = [t0] {
    op_log().set_seconds_of_last(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  };
  if constexpr (std::is_void_v<decltype(body())>) {
    body();
    note();
  } else {
    auto result = body();
    note();
    return result;
  }
}

// With the op log timing kernels (`tessel plan calibrate`), every kernel runs where it is launched,
// strict mode included, so that its own time can be taken.
template <class F, class... T>
void launch_cpu_kernel(F&& body, const T&... tensors) {
  if (!cpu_launches_queued() || op_log().timing() || (tensors.is_host_memory() || ...))
    return run_cpu_kernel_now([&] { body(tensors...); });
  launch_on_cpu([body = std::forward<F>(body), ... views = tensors.borrow()]() mutable { body(views...); });
}

}  // namespace tessel::kernels
