#include "tessel/ckpt/host_copies.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>

#include "tessel/core/device.h"

namespace tessel::ckpt {

namespace {
// Buffers of copies already written, kept for the next save: checkpoints repeat their tensors' sizes,
// and a fresh 1.6 GB allocation costs seconds of page faults each time. Returned by the writer's
// thread, taken by the training thread.
std::mutex g_mu;
std::multimap<size_t, HostBuffer> g_free;
std::atomic<size_t> g_allocated{0};

HostBuffer take_buffer(size_t bytes) {
  {
    const std::lock_guard lock(g_mu);
    if (const auto it = g_free.find(bytes); it != g_free.end()) {
      auto buf = std::move(it->second);
      g_free.erase(it);
      return buf;
    }
  }
  g_allocated += bytes;
  // Not zeroed: it is overwritten at once. Transparent huge pages where the kernel gives them on
  // request (enabled = madvise): the first save's copy faults its pages in, about 3.5 us per 4 KiB
  // page on a VM (5.6 s for 1.6 GB), 2.9 s in 2 MiB pages.
  // Only where rounding up to whole huge pages wastes at most 1/8 (a 2.25 MiB weight would hold 4).
  constexpr size_t kHuge = size_t(2) << 20;
  const size_t rounded = bytes <= SIZE_MAX - kHuge ? (bytes + kHuge - 1) / kHuge * kHuge : 0;
  if (bytes >= kHuge && rounded != 0 && (rounded - bytes) * 8 <= bytes) {
    if (void* p = std::aligned_alloc(kHuge, rounded)) {
      (void)::madvise(p, rounded, MADV_HUGEPAGE);  // advice: without it, 4 KiB pages as before
      return HostBuffer(static_cast<std::byte*>(p));
    }
  }
  void* p = std::malloc(std::max<size_t>(bytes, 1));
  if (!p) throw std::bad_alloc();
  return HostBuffer(static_cast<std::byte*>(p));
}
}  // namespace

size_t host_copy_bytes_allocated() { return g_allocated.load(); }

void FreeHostBuffer::operator()(std::byte* p) const noexcept { std::free(p); }

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
