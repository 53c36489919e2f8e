#include "stop_signals.h"

#include <pthread.h>
#include <signal.h>

#include <csignal>
#include <ctime>

#include "tessel/core/check.h"

namespace tessel::app {
namespace {

std::atomic<int> g_received{0};

void note(int sig) {
  int none = 0;
  g_received.compare_exchange_strong(none, sig);  // the first one wins
}

void on_signal(int sig) { note(sig); }  // async-signal-safe: one lock-free atomic

sigset_t stop_set() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGINT);
  sigaddset(&s, SIGTERM);
  return s;
}

}  // namespace

StopSignals::StopSignals() {
  g_received = 0;
  const sigset_t s = stop_set();
  const int rc = pthread_sigmask(SIG_BLOCK, &s, nullptr);
  TESSEL_CHECK(rc == 0, "cannot block SIGINT and SIGTERM (pthread_sigmask: error {})", rc);
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  watcher_ = std::thread([this, s] {
    const timespec tick{0, 100'000'000};  // looks at quit_ ten times a second
    while (!quit_) {
      const int sig = sigtimedwait(&s, nullptr, &tick);
      if (sig > 0) note(sig);
    }
  });
}

StopSignals::~StopSignals() {
  quit_ = true;
  watcher_.join();
}

int StopSignals::received() const { return g_received; }

}  // namespace tessel::app
