#pragma once
// The cpu device's queue in strict mode (core/device.h): kernels launched by the dispatch points run
// on one thread, in launch order, as on a GPU stream, while the launching thread goes on. Host code
// sees a kernel's results only after a synchronisation, which every explicit copy makes (a
// DeviceAccessScope opened outside the queue synchronises first), so a missing synchronisation reads
// stale memory instead of luckily finding the result there. Outside strict mode, and inside a
// DeviceAccessScope (which has synchronised), a launch runs at once, on the calling thread.
//
// Errors are reported as a GPU reports them: a kernel that throws marks the queue failed; the
// kernels launched after it are skipped, and the next synchronisation rethrows the first error.
#include <functional>

namespace tessel {

// Runs `kernel` on the cpu device. The closure may run after the caller has returned, so it must own
// what it reads: values, and tensors as Tensor::borrow() views (whose memory stays valid because
// freed storage goes back to its pool in queue order, release_in_queue_order).
void launch_on_cpu(std::function<void()> kernel);

// Runs `release` after every kernel launched so far: how freed device memory returns to its pool
// while a kernel may still use it. Runs at once outside strict mode, or on the queue thread. Never
// skipped, not even after an error.
void release_in_queue_order(std::function<void()> release);

// Blocks until every kernel launched before the call has run; rethrows the first error a kernel
// raised since the previous synchronisation. A no-op outside strict mode and on the queue thread.
void synchronize_cpu();

bool on_cpu_queue();  // this thread is the queue's (a kernel launched from a kernel runs inline)
// A launch from this thread goes to the queue (strict mode, not on the queue thread): when false,
// a launcher may run its kernel directly, with no closure to build.
bool cpu_launches_queued();

}  // namespace tessel
