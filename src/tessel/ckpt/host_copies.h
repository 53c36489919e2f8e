#pragma once
// Copies of tensors in host memory, for a checkpoint writer that runs while training changes the
// originals (checkpoint.async_save). The copies are views (from_blob) of buffers this object owns:
// host code on any thread reads them without a device scope, and on a GPU they would be the host
// buffers a device-to-host copy fills.
#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "tessel/ckpt/checkpoint.h"

namespace tessel::ckpt {

// A host buffer from malloc or aligned_alloc, given back with free.
struct FreeHostBuffer {
  void operator()(std::byte* p) const noexcept;
};
using HostBuffer = std::unique_ptr<std::byte[], FreeHostBuffer>;

class HostCopies {
 public:
  // Copies every tensor (an explicit device-to-host copy: it opens its own DeviceAccessScope).
  explicit HostCopies(const NamedTensors& from);
  ~HostCopies();  // its buffers are kept for the next save's copies (same sizes: no page faults)
  HostCopies(HostCopies&&) = default;
  HostCopies& operator=(HostCopies&&) = default;
  const NamedTensors& tensors() const { return tensors_; }

 private:
  std::vector<std::pair<size_t, HostBuffer>> buffers_;  // (bytes, buffer)
  NamedTensors tensors_;
};

// Bytes of host-copy buffers this process has taken from the heap so far (not those reused): what a
// save's staging allocated is the difference across it. A save of the same tensors as an earlier
// one allocates nothing.
size_t host_copy_bytes_allocated();

}  // namespace tessel::ckpt
