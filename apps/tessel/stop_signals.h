#pragma once
// SIGINT and SIGTERM for `tessel train`, received without a signal handler running on a compute
// thread.
//
// oneDNN 2.x's JIT GEMM kernels (jit_avx2_gemm_f32, jit_avx512_common_gemm_f32) point the stack
// pointer into a heap workspace while they run (oneDNN issue 4845, fixed in oneDNN 3.11): a signal
// handled by a thread inside one of them has its frame pushed onto the heap, which corrupts it.
// Seen here as "corrupted size vs. prev_size while consolidating" (SIGABRT) or a SIGSEGV in free()
// in a later GEMM, in about 1 run in 20 of TrainCli.SigtermSavesAndExitsForRequeue on an AVX2-only
// CPU, where every GEMM runs those kernels.
//
// So both signals are blocked in the thread that constructs StopSignals, before it starts any
// other thread (OpenMP's workers, MPI's and the batch loader's threads inherit the mask), and a
// thread of its own takes them with sigtimedwait, which runs no handler. A handler that only sets
// the flag stays installed for a thread that unblocks them (a library's own), which runs no oneDNN
// code.
#include <atomic>
#include <thread>

namespace tessel::app {

class StopSignals {
 public:
  StopSignals();   // blocks SIGINT and SIGTERM in this thread and starts the watcher
  ~StopSignals();  // stops and joins the watcher (the signals stay blocked)
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  int received() const;  // the first signal received (SIGINT or SIGTERM), 0 while none

 private:
  std::atomic<bool> quit_{false};
  std::thread watcher_;
};

}  // namespace tessel::app
