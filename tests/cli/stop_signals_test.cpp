// StopSignals (apps/tessel/stop_signals.h): threads started after it keep SIGINT and SIGTERM
// blocked (so no signal handler can run inside a oneDNN JIT kernel on them), and its watcher still
// receives a signal sent to the process.
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "../../apps/tessel/stop_signals.h"

namespace tessel {
namespace {

bool blocked_here(int sig) {
  sigset_t now;
  pthread_sigmask(SIG_BLOCK, nullptr, &now);
  return sigismember(&now, sig) == 1;
}

TEST(StopSignals, LaterThreadsKeepThemBlockedAndTheWatcherTakesThem) {
  sigset_t before;
  pthread_sigmask(SIG_BLOCK, nullptr, &before);
  {
    const app::StopSignals stop;
    EXPECT_EQ(stop.received(), 0);
    bool int_blocked = false, term_blocked = false;
    std::thread([&] {
      int_blocked = blocked_here(SIGINT);
      term_blocked = blocked_here(SIGTERM);
    }).join();
    EXPECT_TRUE(int_blocked);
    EXPECT_TRUE(term_blocked);
    kill(getpid(), SIGTERM);  // process-directed, as kill(1), mpirun and schedulers send it
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (stop.received() == 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(stop.received(), SIGTERM);
    kill(getpid(), SIGINT);  // a second signal does not replace the first
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(stop.received(), SIGTERM);
  }
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
}

}  // namespace
}  // namespace tessel
