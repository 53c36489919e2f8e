#include "tessel/ckpt/host_copies.h"

#include <cstring>
#include <map>
#include <mutex>

#include "tessel/core/device.h"

namespace tessel::ckpt {

namespace {
// Buffers of copies already written, kept for the next save: checkpoints repeat their tensors' sizes,
// and a fresh 1.6 GB allocation costs seconds of page faults each time. Returned by the writer's
// thread, taken by the training thread.
std::mutex g_mu;
std::multimap<size_t, std::unique_ptr<std::byte[]>> g_free;

std::unique_ptr<std::byte[]> take_buffer(size_t bytes) {
  {
    const std::lock_guard lock(g_mu);
    if (const auto it = g_free.find(bytes); it != g_free.end()) {
      auto buf = std::move(it->second);
      g_free.erase(it);
      return buf;
    }
  }
  return std::unique_ptr<std::byte[]>(new std::byte[bytes]);  // not zeroed: it is overwritten at once
}
}  // namespace

HostCopies::HostCopies(const NamedTensors& from) {
  const DeviceAccessScope copy;  // device memory to the host, after the kernels launched before
  for (const auto& [name, t] : from) {
    const Tensor c = t.is_contiguous() ? t : t.clone();
    buffers_.emplace_back(c.nbytes(), take_buffer(c.nbytes()));
    std::memcpy(buffers_.back().second.get(), c.raw(), c.nbytes());
    tensors_.emplace_back(name, Tensor::from_blob(buffers_.back().second.get(), c.shape(), c.dtype()));
  }
}

HostCopies::~HostCopies() {
  const std::lock_guard lock(g_mu);
  for (auto& [bytes, buf] : buffers_)
    if (buf) g_free.emplace(bytes, std::move(buf));
}

}  // namespace tessel::ckpt
