// Strict cpu mode as a GPU behaves (core/device_queue.h, core/device_arena.h): kernels run on a queue
// thread after the launch returns, so host code that skips the synchronisation reads what was there
// before; a kernel's error reaches the host at the next synchronisation; freed memory is reused in
// queue order; and a host pointer kept past its kernel stops the process with a message.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>

#include "tessel/core/device.h"
#include "tessel/core/device_queue.h"
#include "tessel/core/tensor.h"

namespace tessel {
namespace {

// Strict mode (or not) for one test, whatever TESSEL_DEVICE says; as it was after (the queue drained).
struct StrictMode {
  explicit StrictMode(bool on = true) : previous(strict_cpu()) { set_strict_cpu(on); }
  ~StrictMode() { set_strict_cpu(previous); }
  bool previous;
};

TEST(CpuQueue, ALaunchReturnsBeforeTheKernelRunsAndASynchronisationWaitsForIt) {
  const StrictMode strict;
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  std::atomic<bool> ran{false};
  launch_on_cpu([opened, &ran] {
    opened.wait();
    ran = true;
  });
  EXPECT_FALSE(ran.load());  // the kernel cannot have run: it waits for the gate
  gate.set_value();
  synchronize_cpu();
  EXPECT_TRUE(ran.load());
}

TEST(CpuQueue, HostCodeThatSkipsTheSynchronisationReadsWhatWasThereBefore) {
  const StrictMode strict;
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  int host_value = 1;  // host memory, written by the "kernel" (as a device-to-host copy would)
  launch_on_cpu([opened, p = &host_value] {
    opened.wait();
    *p = 2;
  });
  const int unsynchronised = host_value;  // the bug strict mode exposes: no synchronisation first
  gate.set_value();
  synchronize_cpu();
  EXPECT_EQ(unsynchronised, 1);
  EXPECT_EQ(host_value, 2);
}

TEST(CpuQueue, AnExplicitCopySynchronisesFirst) {
  const StrictMode strict;
  Tensor t = Tensor::empty({1024}, DType::f32);
  t.fill(1.0);  // queued
  launch_on_cpu([v = t.borrow()] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // long after the launch returned
    v.data<float>()[1023] = 7.0f;
  });
  EXPECT_EQ(t.slice(0, 1023, 1024).item(), 7.0);  // item() is a device-to-host copy: it waits
}

TEST(CpuQueue, AKernelsErrorReachesTheNextSynchronisationAndLaterKernelsAreSkipped) {
  const StrictMode strict;
  std::atomic<int> later{0};
  launch_on_cpu([] { throw std::runtime_error("kernel failed: index 9 outside 4 rows"); });
  launch_on_cpu([&later] { ++later; });
  try {
    synchronize_cpu();
    FAIL() << "the synchronisation did not report the kernel's error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "kernel failed: index 9 outside 4 rows");
  }
  EXPECT_EQ(later.load(), 0);
  launch_on_cpu([&later] { ++later; });  // reported once: the queue works on
  synchronize_cpu();
  EXPECT_EQ(later.load(), 1);
}

TEST(CpuQueue, FreedMemoryIsReusedOnlyAfterTheKernelsLaunchedBeforeTheFree) {
  const StrictMode strict;
  synchronize_cpu();
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  const size_t bytes = 3 << 20;
  const void* first = nullptr;
  {
    Tensor a = Tensor::empty({int64_t(bytes / 4)}, DType::f32);
    first = a.device_ptr();
    launch_on_cpu([opened, v = a.borrow()] {
      opened.wait();
      v.data<float>()[0] = 1.0f;  // still uses the block after the host freed it
    });
  }  // freed on the host (accounted at once), its block back to the pool in queue order
  Tensor b = Tensor::empty({int64_t(bytes / 4)}, DType::f32);  // held: its own release would come later
  EXPECT_NE(b.device_ptr(), first) << "a block reused while a kernel launched before its free may still use it";
  gate.set_value();
  synchronize_cpu();
  Tensor c = Tensor::empty({int64_t(bytes / 4)}, DType::f32);
  EXPECT_EQ(c.device_ptr(), first) << "the block comes back once the queue has passed the free";
}

TEST(CpuQueue, OutsideStrictModeALaunchRunsAtOnce) {
  const StrictMode plain(false);
  bool ran = false;
  launch_on_cpu([&ran] { ran = true; });
  EXPECT_TRUE(ran);
}

TEST(DeviceArenaDeathTest, AHostPointerKeptPastItsKernelStopsTheProcessNamingTheAccess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        set_strict_cpu(true);
        Tensor t = Tensor::zeros({16}, DType::f32);
        float* kept = nullptr;
        {
          const DeviceAccessScope copy;  // legitimately reached here...
          kept = t.data<float>();
        }
        kept[3] = 1.0f;  // ...and written after: device memory is PROT_NONE again
      },
      "strict cpu mode: host code touched device memory at 0x[0-9a-f]+ outside a kernel or an explicit copy");
}

TEST(DeviceArena, OutsideStrictModeTensorsMadeInItStayReachable) {
  Tensor t;
  {
    const StrictMode strict;
    t = Tensor::zeros({16}, DType::f32);
  }
  const StrictMode plain(false);
  t.data<float>()[3] = 2.0f;  // plain memory again: strict mode is off
  EXPECT_EQ(t.data<float>()[3], 2.0f);
}

}  // namespace
}  // namespace tessel
