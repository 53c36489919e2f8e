#pragma once
// The writer thread of an asynchronous checkpoint save (checkpoint.async_save): runs a StagedSave's
// write() (file I/O only, on copies the stage made) while training goes on. Its error, if any, is
// thrown by wait() on the thread that started it; destroying it waits for the write, so no process
// leaves with a write in flight.
#include <atomic>
#include <exception>
#include <functional>
#include <thread>

namespace tessel::ckpt {

class BackgroundWrite {
 public:
  explicit BackgroundWrite(std::function<void()> write);
  ~BackgroundWrite();
  BackgroundWrite(const BackgroundWrite&) = delete;
  BackgroundWrite& operator=(const BackgroundWrite&) = delete;
  bool done() const { return done_.load(std::memory_order_acquire); }  // without waiting
  void wait();  // joins; rethrows the write's error (once)

 private:
  std::atomic<bool> done_{false};
  std::exception_ptr error_;
  std::thread thread_;  // last: started once the members it writes exist
};

}  // namespace tessel::ckpt
