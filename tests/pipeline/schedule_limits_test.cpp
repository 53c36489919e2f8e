// Hostile schedule sizes and costs: refused with the bound instead of running for hours, and charts
// of any length stay a bounded size.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <string>

#include "support/error_of.h"
#include "tessel/core/check.h"
#include "tessel/pipeline/simulate.h"

namespace tessel::pipeline {
namespace {

using tessel::testing::error_of;

TEST(ScheduleLimits, HugeSchedulesAreRefusedWithTheBound) {
  const std::string bound = std::to_string(kMaxSchedulePasses);
  EXPECT_NE(error_of([] { make_1f1b(100000, 100000); })
                .find("a pipeline schedule of pp 100000 x vpp 1 x 100000 micro-batches = 10000000000 passes is larger "
                      "than the " + bound + " allowed"),
            std::string::npos);
  EXPECT_NE(error_of([] { make_interleaved_1f1b(1024, 64, 1 << 20); }).find("passes is larger than the"),
            std::string::npos);
  // Sizes whose product overflows int are still refused, not wrapped.
  EXPECT_NE(error_of([] { make_interleaved_1f1b(65536, 65536, 65536); }).find("= 281474976710656 passes"),
            std::string::npos);
}

TEST(ScheduleLimits, NegativeOrNonFiniteCostsAreRefused) {
  Schedule s = make_1f1b(2, 2);
  add_p2p(s);
  EXPECT_NE(error_of([&] { simulate(s, Costs{-1, 1, 1, 0}); })
                .find("pipeline costs must be finite and >= 0, got F -1 B 1 W 1 comm 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] { simulate(s, Costs{1, 1, 1, std::numeric_limits<double>::infinity()}); })
                .find("pipeline costs must be finite and >= 0"),
            std::string::npos);
}

TEST(ScheduleLimits, ChartRowsStayBoundedForAnyUnit) {
  Schedule s = make_1f1b(2, 4);
  add_p2p(s);
  const Timeline t = simulate(s, Costs{1e12, 1e-12, 1e-12, 0});
  const std::string chart = render(s, t, 1e-12);  // 1e24 columns at this unit
  const auto first_row = chart.substr(0, chart.find('\n'));
  EXPECT_LE(first_row.size(), 4096u + 16u) << first_row.size();
  EXPECT_NE(chart.find("makespan"), std::string::npos);
  // Small timelines keep one character per unit. By hand, 2 ranks, 2 micro-batches, unit costs:
  // rank 1 runs F0 1-2, B0 2-3, W0 3-4, F1 4-5, B1 5-6, W1 6-7; rank 0 F0, F1, waits for B0's
  // gradient until 3, B0, W0, waits for B1's until 6, B1, W1.
  Schedule small = make_1f1b(2, 2);
  add_p2p(small);
  const Timeline ts = simulate(small, Costs{1, 1, 1, 0});
  const std::string text = render(small, ts, 1.0);
  EXPECT_EQ(text.substr(0, text.find('\n')), "rank  0 |FF.BW.BW|");
}

}  // namespace
}  // namespace tessel::pipeline
