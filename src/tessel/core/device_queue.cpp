#include "tessel/core/device_queue.h"

#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "tessel/core/device.h"
#include "tessel/core/device_arena.h"

namespace tessel {

namespace {

thread_local bool t_on_queue = false;

// One queue thread, started by the first launch in strict mode and never stopped (tensors may be
// freed by static destructors after main returns; their releases still need it). Items are ticketed
// in submission order; synchronize() waits for the ticket it saw when called, so a thread that keeps
// launching cannot starve another that synchronises.
class CpuQueue {
 public:
  static CpuQueue& instance() {
    static CpuQueue* q = new CpuQueue;  // never destroyed, see above
    return *q;
  }

  void submit(std::function<void()> fn, bool is_kernel) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      items_.push_back({std::move(fn), is_kernel});
      ++submitted_;
    }
    work_.notify_one();
  }

  void synchronize() {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t ticket = submitted_;
    done_.wait(lock, [&] { return completed_ >= ticket; });
    if (error_) {
      std::exception_ptr e = error_;
      error_ = nullptr;
      std::rethrow_exception(e);
    }
  }

 private:
  struct Item {
    std::function<void()> fn;
    bool is_kernel;
  };

  CpuQueue() {
    std::thread([this] { run(); }).detach();
    // A process that exits with kernels in flight would tear down what they use under them.
    std::atexit([] {
      try {
        CpuQueue::instance().synchronize();
      } catch (...) {
      }
    });
  }

  void run() {
    t_on_queue = true;
    const DeviceAccessScope always;  // the queue is where device memory is reached
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      work_.wait(lock, [&] { return !items_.empty(); });
      // Device memory stays reachable while the queue drains, not per kernel: two mprotect calls per
      // batch instead of per launch.
      const DeviceMemoryAccess access;
      while (!items_.empty()) {
        Item item = std::move(items_.front());
        items_.pop_front();
        const bool skip = item.is_kernel && error_;
        lock.unlock();
        std::exception_ptr failed;
        if (!skip) {
          try {
            item.fn();
          } catch (...) {
            failed = std::current_exception();
          }
        }
        item.fn = nullptr;  // its captures are released outside the lock
        lock.lock();
        if (failed && !error_) error_ = failed;
        ++completed_;
        done_.notify_all();
      }
    }
  }

  std::mutex mu_;
  std::condition_variable work_, done_;
  std::deque<Item> items_;
  uint64_t submitted_ = 0, completed_ = 0;
  std::exception_ptr error_;
};

// Inside a DeviceAccessScope the host thread has synchronised and holds device memory: a kernel it
// launches there runs at once, so the code in the scope reads its result (a checkpoint save that
// converts a tensor, then writes it).
bool queued() { return strict_cpu() && !t_on_queue && !in_device_access(); }

}  // namespace

void launch_on_cpu(std::function<void()> kernel) {
  if (queued()) {
    CpuQueue::instance().submit(std::move(kernel), true);
    return;
  }
  const DeviceAccessScope on_device;
  kernel();
}

void release_in_queue_order(std::function<void()> release) {
  if (queued())
    CpuQueue::instance().submit(std::move(release), false);
  else
    release();
}

void synchronize_cpu() {
  if (strict_cpu() && !t_on_queue) CpuQueue::instance().synchronize();
}

bool on_cpu_queue() { return t_on_queue; }
bool cpu_launches_queued() { return queued(); }

}  // namespace tessel
