#include "tessel/ckpt/host_copies.h"

#include <cstring>

#include "tessel/core/device.h"

namespace tessel::ckpt {

HostCopies::HostCopies(const NamedTensors& from) {
  const DeviceAccessScope copy;  // device memory to the host, after the kernels launched before
  for (const auto& [name, t] : from) {
    const Tensor c = t.is_contiguous() ? t : t.clone();
    buffers_.push_back(std::make_unique<std::byte[]>(c.nbytes()));
    std::memcpy(buffers_.back().get(), c.raw(), c.nbytes());
    tensors_.emplace_back(name, Tensor::from_blob(buffers_.back().get(), c.shape(), c.dtype()));
  }
}

}  // namespace tessel::ckpt
