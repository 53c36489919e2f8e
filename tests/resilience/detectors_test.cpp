// Anomaly detectors and the rewind budget against values worked out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tessel/resilience/detectors.h"
#include "tessel/resilience/rewind.h"

namespace tessel::resilience {
namespace {

train::ResilienceConfig spikes(double loss_z, double norm_z, int64_t window) {
  train::ResilienceConfig c;
  c.loss_spike_zscore = loss_z;
  c.grad_norm_spike_zscore = norm_z;
  c.spike_window = window;
  return c;
}

TEST(Window, MeanAndPopulationDeviationOfTheLastValues) {
  Window w(4);
  for (double v : {100.0, 1.0, 2.0, 3.0, 4.0}) w.add(v);  // 100 slid out
  EXPECT_TRUE(w.full());
  EXPECT_DOUBLE_EQ(w.mean(), 2.5);
  EXPECT_DOUBLE_EQ(w.stddev(), std::sqrt(1.25));  // ((1.5^2 + 0.5^2) * 2) / 4
}

TEST(AnomalyDetectors, NonFiniteLossOrNormFiresAtOnceAndOnlyWhenOn) {
  AnomalyDetectors on(train::ResilienceConfig{});
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(on.check(5.0, 1.0));
  ASSERT_TRUE(on.check(nan, 1.0));
  EXPECT_EQ(on.check(nan, 1.0)->detector, Detector::nonfinite);
  EXPECT_EQ(on.check(5.0, inf)->detector, Detector::nonfinite);
  train::ResilienceConfig off_cfg;
  off_cfg.detect_nonfinite = false;
  EXPECT_FALSE(AnomalyDetectors(off_cfg).check(nan, inf));
}

TEST(AnomalyDetectors, LossSpikeIsAZScoreOverAFullWindowOfAcceptedSteps) {
  AnomalyDetectors d(spikes(3, 0, 4));
  for (double v : {2.0, 4.0, 2.0}) {  // window not full: nothing can be a spike yet
    EXPECT_FALSE(d.check(100.0, 1.0));
    d.accept(v, 1.0);
  }
  d.accept(4.0, 1.0);  // window 2, 4, 2, 4: mean 3, sd 1, threshold 3 + 3 x 1 = 6
  EXPECT_FALSE(d.check(6.0, 1.0));
  const auto a = d.check(6.01, 1.0);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->detector, Detector::loss_spike);
  EXPECT_DOUBLE_EQ(a->threshold, 6.0);
  EXPECT_FALSE(d.check(-50.0, 1.0));  // a drop is not a fault
}

TEST(AnomalyDetectors, GradNormSpikeAndTheFloorUnderAFlatWindow) {
  AnomalyDetectors d(spikes(0, 5, 3));
  for (int i = 0; i < 3; ++i) d.accept(1.0, 2.0);  // sd 0: the floor 1e-3 x 2 makes the threshold 2.01
  EXPECT_FALSE(d.check(1.0, 2.009));
  ASSERT_TRUE(d.check(1.0, 2.011));
  EXPECT_EQ(d.check(1.0, 2.011)->detector, Detector::grad_norm_spike);
  EXPECT_FALSE(d.check(1e9, 2.0));  // the loss detector is off
}

TEST(AnomalyDetectors, FlaggedStepsNeverJoinTheWindow) {
  AnomalyDetectors d(spikes(2, 0, 2));
  d.accept(1.0, 1.0);
  d.accept(std::numeric_limits<double>::quiet_NaN(), 1.0);  // ignored
  EXPECT_FALSE(d.check(100.0, 1.0));                        // still one value: not armed
  d.accept(3.0, 1.0);                                       // mean 2, sd 1: threshold 4
  EXPECT_TRUE(d.check(4.5, 1.0));
}

// A restart restores the windows saved in its checkpoint: armed at once, as the run was.
TEST(AnomalyDetectors, RestoredWindowsAreArmedAsTheSavedOnes) {
  AnomalyDetectors saved(spikes(2, 0, 2)), fresh(spikes(2, 0, 2));
  saved.accept(9.0, 1.0);  // pushed out of the window by the next two
  saved.accept(1.0, 1.0);
  saved.accept(3.0, 1.0);
  EXPECT_EQ(saved.loss_window(), (std::vector<double>{1.0, 3.0}));
  EXPECT_FALSE(fresh.check(4.5, 1.0));  // empty: not armed
  fresh.restore(saved.loss_window(), saved.grad_norm_window());
  ASSERT_TRUE(fresh.check(4.5, 1.0));  // mean 2, sd 1: threshold 4
  EXPECT_EQ(fresh.check(4.5, 1.0)->threshold, 4.0);
  // A window of another size keeps the newest values that fit.
  AnomalyDetectors smaller(spikes(2, 0, 1));
  smaller.restore({1.0, 3.0}, {1.0, 1.0});
  EXPECT_EQ(smaller.loss_window(), (std::vector<double>{3.0}));
}

TEST(RewindBudget, CountsRewindsWithinTheWindow) {
  RewindBudget b(2, 10);
  EXPECT_TRUE(b.allow(5));
  EXPECT_TRUE(b.allow(9));
  EXPECT_FALSE(b.allow(14));  // 5, 9, 14 within 10 steps: the third is one too many
  RewindBudget c(2, 10);
  EXPECT_TRUE(c.allow(5));
  EXPECT_TRUE(c.allow(9));
  EXPECT_TRUE(c.allow(15));  // 5 left the window (15 - 10 = 5)
  RewindBudget none(0, 10);
  EXPECT_FALSE(none.allow(1));
  // Restored from a checkpoint: the rewinds counted before the restart still count.
  RewindBudget restarted(2, 10);
  restarted.restore(b.steps());
  EXPECT_EQ(restarted.steps(), (std::vector<int64_t>{5, 9, 14}));
  EXPECT_FALSE(restarted.allow(15));
}

TEST(RewindEvent, JsonWritesANonFiniteValueAsText) {
  RewindEvent e;
  e.step = 7;
  e.anomaly = {Detector::nonfinite, std::numeric_limits<double>::quiet_NaN(), 0};
  e.ranks = {1};
  e.restored_from = "snapshot";
  e.restored_step = 6;
  e.skipped_first = 7;
  e.skipped_last = 7;
  e.skipped_samples = 16;
  const auto j = e.json();
  EXPECT_EQ(j["event"], "rewind");
  EXPECT_EQ(j["detector"], "nonfinite");
  EXPECT_EQ(j["value"], "nan");
  EXPECT_EQ(j["skipped_iterations"], nlohmann::json({7, 7}));
  EXPECT_NE(e.line().find("restored step 6 from snapshot, skipping iterations 7-7 (16 samples)"), std::string::npos);
}

}  // namespace
}  // namespace tessel::resilience
