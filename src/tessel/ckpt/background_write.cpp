#include "tessel/ckpt/background_write.h"

#include <sys/resource.h>
#include <unistd.h>

#include <utility>

namespace tessel::ckpt {

BackgroundWrite::BackgroundWrite(std::function<void()> write)
    : thread_([this, w = std::move(write)] {
        // The lowest priority: training keeps the cores (on the cpu device it uses all of them), the
        // write takes what is left and the interval until the next save. Best effort: a refusal
        // leaves the default priority.
        (void)::setpriority(PRIO_PROCESS, pid_t(::gettid()), 19);
        try {
          w();
        } catch (...) {
          error_ = std::current_exception();
        }
        done_.store(true, std::memory_order_release);
      }) {}

BackgroundWrite::~BackgroundWrite() {
  if (thread_.joinable()) thread_.join();
}

void BackgroundWrite::wait() {
  if (thread_.joinable()) thread_.join();
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

}  // namespace tessel::ckpt
