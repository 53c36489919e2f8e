// core/paired_tasks.h: two tasks that pass control only at their yield points, one thread at a time.
#include "tessel/core/paired_tasks.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tessel/core/check.h"

namespace tessel {
namespace {

// The order the two tasks ran in is fixed by their yields alone: the first runs to its first yield,
// the second to its first, and so on; once one has ended the other's yields return at once.
TEST(PairedTasks, ControlPassesOnlyAtYieldsInAFixedOrder) {
  for (int repeat = 0; repeat < 20; ++repeat) {
    std::vector<std::string> order;
    std::atomic<int> running{0}, most{0};
    const auto mark = [&](const char* what) {
      const int now = ++running;
      most = std::max(most.load(), now);
      order.push_back(what);
      std::this_thread::sleep_for(std::chrono::microseconds(50));  // room for a second thread to slip in
      --running;
    };
    run_paired(
        [&] {
          mark("F1");
          yield_to_paired_task();
          mark("F2");
          yield_to_paired_task();
          mark("F3");
          yield_to_paired_task();
          mark("F4");
        },
        [&] {
          mark("B1");
          yield_to_paired_task();
          mark("B2");
        });
    EXPECT_EQ(order, (std::vector<std::string>{"F1", "B1", "F2", "B2", "F3", "F4"}));
    EXPECT_EQ(most.load(), 1) << "both tasks ran at once";
  }
}

TEST(PairedTasks, TheSecondRunsOnAnotherThreadKeptBetweenPairs) {
  std::thread::id first, second, again;
  run_paired([&] { first = std::this_thread::get_id(); }, [&] { second = std::this_thread::get_id(); });
  run_paired([] {}, [&] { again = std::this_thread::get_id(); });
  EXPECT_EQ(first, std::this_thread::get_id());
  EXPECT_NE(second, first);
  EXPECT_EQ(again, second);
}

// A failed first task ends the pair at once: the second is not resumed (its peers may be gone), and
// the next pair runs on a new helper thread. A failed second task ends it, and the first task's next
// yield rethrows its exception, so the first unwinds too.
TEST(PairedTasks, AFailureEndsThePairWithoutWaitingOnTheOtherTask) {
  bool second_resumed = false;
  try {
    run_paired(
        [] {
          yield_to_paired_task();
          throw std::runtime_error("first failed");
        },
        [&] {
          yield_to_paired_task();
          second_resumed = true;
        });
    ADD_FAILURE() << "nothing was thrown";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "first failed");
  }
  EXPECT_FALSE(second_resumed);
  std::vector<std::string> order;  // the next pair still runs, in order
  run_paired(
      [&] {
        order.push_back("F1");
        yield_to_paired_task();
        order.push_back("F2");
      },
      [&] { order.push_back("B1"); });
  EXPECT_EQ(order, (std::vector<std::string>{"F1", "B1", "F2"}));

  bool first_went_on = false;
  try {
    run_paired(
        [&] {
          yield_to_paired_task();
          first_went_on = true;
        },
        [] { throw std::logic_error("second failed"); });
    ADD_FAILURE() << "nothing was thrown";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "second failed");
  }
  EXPECT_FALSE(first_went_on);
}

TEST(PairedTasks, HeldTimesAddUpAndYieldOutsideAPairDoesNothing) {
  yield_to_paired_task();  // no pair: returns at once
  const auto t0 = std::chrono::steady_clock::now();
  const std::array<double, 2> held = run_paired(
      [] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        yield_to_paired_task();
      },
      [] { std::this_thread::sleep_for(std::chrono::milliseconds(40)); });
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(held[0], 0.019);
  EXPECT_GE(held[1], 0.039);
  EXPECT_LE(held[0] + held[1], wall);
}

// The turns are what a trace draws for a fused pair: in order, alternating, back to back, each as
// long as its task held it, and adding up to the held times.
TEST(PairedTasks, TurnsAreReportedInOrderAndAddUpToTheHeldTimes) {
  std::vector<PairedTurn> turns;
  const std::array<double, 2> held = run_paired(
      [] {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        yield_to_paired_task();
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      },
      [] {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        yield_to_paired_task();
      },
      &turns);
  // First, second (until its yield), first (to its end), second (from its yield to its end).
  ASSERT_EQ(turns.size(), 4u);
  const int order[] = {0, 1, 0, 1};
  std::array<double, 2> sum{0, 0};
  for (size_t i = 0; i < turns.size(); ++i) {
    EXPECT_EQ(turns[i].task, order[i]) << i;
    EXPECT_LE(turns[i].start, turns[i].end) << i;
    if (i > 0) {
      EXPECT_EQ(turns[i].start, turns[i - 1].end) << i;
    }
    sum[size_t(turns[i].task)] += turns[i].end - turns[i].start;
  }
  EXPECT_GE(turns[1].end - turns[1].start, 0.0095);
  EXPECT_NEAR(sum[0], held[0], 1e-9);
  EXPECT_NEAR(sum[1], held[1], 1e-9);
}

TEST(PairedTasks, PairsDoNotNest) {
  try {
    run_paired([] { run_paired([] {}, [] {}); }, [] {});
    ADD_FAILURE() << "a nested pair ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pairs do not nest"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessel
