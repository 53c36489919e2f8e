// LrSchedule against Megatron-LM's OptimizerParamScheduler.get_lr, re-stated here from its
// definition (iteration-based training: init_lr = 0, lr_decay_iters = train_iters):
//   n = optimizer steps completed before this one (the scheduler is stepped once at construction with
//       increment 0 and once after every optimizer step): tessel's 0-based `iter`.
//   warm-up:  n <= W (W > 0)        -> max_lr * n / W          (0 at the first step, max_lr at n = W)
//   constant:                       -> max_lr
//   past the end: n > D             -> min_lr
//   otherwise r = (n - W) / (D - W), lr = min_lr + coeff * (max_lr - min_lr) with
//     linear coeff = 1 - r;  cosine coeff = (cos(pi r) + 1) / 2;
//     WSD (linear anneal): coeff = 1 while n <= D - S, then 1 - (n - (D - S)) / S.
// The expected values at the named points (step 0, end of warm-up, mid-decay, end, past the end) are
// also written out as plain numbers, so the reference function is itself checked.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "tessel/core/check.h"
#include "tessel/optim/lr_schedule.h"

namespace tessel {
namespace {

struct Megatron {
  double max_lr, min_lr;
  int64_t warmup, decay, wsd_decay;  // lr_warmup_iters, lr_decay_iters (= train_iters), lr_wsd_decay_iters
  std::string style;

  double lr(int64_t n) const {
    if (warmup > 0 && n <= warmup) return max_lr * double(n) / double(warmup);
    if (style == "constant") return max_lr;
    if (n > decay) return min_lr;
    const double r = double(n - warmup) / double(decay - warmup);
    double coeff = 0;
    if (style == "linear") {
      coeff = 1.0 - r;
    } else if (style == "cosine") {
      coeff = 0.5 * (std::cos(M_PI * r) + 1.0);
    } else {  // wsd
      const int64_t anneal_start = decay - wsd_decay;
      coeff = n <= anneal_start ? 1.0 : 1.0 - double(n - anneal_start) / double(wsd_decay);
    }
    return min_lr + coeff * (max_lr - min_lr);
  }

  optim::LrSchedule tessel() const {
    optim::LrSchedule s;
    s.lr = max_lr;
    s.min_lr = min_lr;
    s.warmup_iters = warmup;
    s.total_iters = decay;
    s.style = style;
    s.wsd_decay_iters = wsd_decay;
    s.validate();
    return s;
  }
};

// Every step from 0 to well past the end. The schedule is a few double operations: 1e-15 relative.
void expect_matches_everywhere(const Megatron& m) {
  const optim::LrSchedule s = m.tessel();
  for (int64_t n = 0; n <= m.decay + m.warmup + 5; ++n)
    EXPECT_NEAR(s.at(n), m.lr(n), 1e-15 * m.max_lr) << m.style << " step " << n;
}

TEST(LrSchedule, EveryStyleMatchesMegatronAtEveryStep) {
  for (const char* style : {"constant", "linear", "cosine", "wsd"})
    for (int64_t warmup : {0, 1, 7})
      for (int64_t wsd_decay : {0, 1, 5, 20}) {
        if (std::string(style) != "wsd" && wsd_decay > 0) continue;
        expect_matches_everywhere({1e-3, 1e-4, warmup, 20, wsd_decay, style});
        expect_matches_everywhere({1e-3, 0.0, warmup, 20, wsd_decay, style});
      }
}

// The named points, as numbers: lr 1e-3, min_lr 1e-4, warm-up 10, 110 iterations (100 of decay).
TEST(LrSchedule, NamedPointsAsNumbers) {
  const double kTol = 1e-18;
  for (const char* style : {"constant", "linear", "cosine", "wsd"}) {
    SCOPED_TRACE(style);
    const Megatron m{1e-3, 1e-4, 10, 110, 40, style};
    const optim::LrSchedule s = m.tessel();
    EXPECT_NEAR(s.at(0), 0.0, kTol);     // the first step of a warm-up runs at lr 0 (Megatron's init_lr)
    EXPECT_NEAR(s.at(4), 4e-4, kTol);    // 1e-3 * 4 / 10
    EXPECT_NEAR(s.at(10), 1e-3, kTol);   // end of warm-up: the peak
    EXPECT_NEAR(m.lr(4), 4e-4, kTol);
    EXPECT_NEAR(m.lr(10), 1e-3, kTol);
    const std::string st = style;
    // Mid-decay (r = 1/2 at step 60); the end (step 110, r = 1); past the end.
    const double mid = st == "constant" ? 1e-3 : st == "wsd" ? 1e-3 : 5.5e-4;  // cosine and linear agree at r = 1/2
    const double end = st == "constant" ? 1e-3 : 1e-4;
    EXPECT_NEAR(s.at(60), mid, 1e-15);
    EXPECT_NEAR(m.lr(60), mid, 1e-15);
    EXPECT_NEAR(s.at(110), end, 1e-15);
    EXPECT_NEAR(s.at(111), end, 1e-15);
    EXPECT_NEAR(s.at(100000), end, 1e-15);
  }
  // Points that tell the shapes apart: r = 1/4 (step 35).
  EXPECT_NEAR(Megatron({1e-3, 1e-4, 10, 110, 0, "linear"}).tessel().at(35), 1e-4 + 0.75 * 9e-4, 1e-15);
  EXPECT_NEAR(Megatron({1e-3, 1e-4, 10, 110, 0, "cosine"}).tessel().at(35),
              1e-4 + 0.5 * (1 + std::sqrt(0.5)) * 9e-4, 1e-15);
  // WSD with a 40-step anneal over steps 70..110: stable at 70, a quarter down at 80.
  const optim::LrSchedule wsd = Megatron({1e-3, 1e-4, 10, 110, 40, "wsd"}).tessel();
  EXPECT_NEAR(wsd.at(70), 1e-3, 1e-15);
  EXPECT_NEAR(wsd.at(80), 1e-3 - 0.25 * 9e-4, 1e-15);
  EXPECT_NEAR(wsd.at(109), 1e-4 + 9e-4 / 40, 1e-15);
}

// A warm-up longer than the run (a smoke test `--set train.train_iters=5` of a config warming up over
// 20 steps): accepted, as Megatron does, and every step of the run stays on the warm-up ramp.
TEST(LrSchedule, WarmupLongerThanTrainingStaysInWarmup) {
  for (const char* style : {"constant", "linear", "cosine", "wsd"}) {
    const Megatron m{1e-3, 1e-4, 20, 5, 2, style};
    expect_matches_everywhere(m);
    const optim::LrSchedule s = m.tessel();
    for (int64_t n = 0; n < 5; ++n) EXPECT_NEAR(s.at(n), 1e-3 * double(n) / 20.0, 1e-18) << style << " " << n;
  }
}

// Warm-up exactly as long as the run: the last step reaches the peak.
TEST(LrSchedule, WarmupAsLongAsTraining) {
  expect_matches_everywhere({1e-3, 1e-4, 8, 8, 0, "cosine"});
  const optim::LrSchedule s = Megatron{1e-3, 1e-4, 8, 8, 0, "cosine"}.tessel();
  EXPECT_NEAR(s.at(7), 8.75e-4, 1e-18);  // 1e-3 * 7 / 8
  EXPECT_NEAR(s.at(8), 1e-3, 1e-18);
}

std::string validation_error(optim::LrSchedule s) {
  try {
    s.validate();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(LrSchedule, ValidateNamesTheKeyAndTheAllowedRange) {
  optim::LrSchedule s;
  s.total_iters = 10;
  s.style = "inverse-square-root";
  EXPECT_NE(validation_error(s).find("train.lr_decay_style: 'inverse-square-root' is not supported (allowed: "
                                     "constant, linear, cosine, wsd)"),
            std::string::npos);
  s.style = "cosine";
  s.min_lr = 1.0;
  EXPECT_NE(validation_error(s).find("train.min_lr (1) must be within [0, train.lr (0.0003)]"), std::string::npos);
  s.min_lr = 0;
  s.warmup_iters = -1;
  EXPECT_NE(validation_error(s).find("train.lr_warmup_iters must be >= 0, got -1"), std::string::npos);
  s.warmup_iters = 0;
  s.wsd_decay_iters = -3;
  EXPECT_NE(validation_error(s).find("train.lr_wsd_decay_iters must be >= 0, got -3"), std::string::npos);
  s.wsd_decay_iters = 0;
  s.warmup_iters = 11;  // longer than the run: allowed
  EXPECT_EQ(validation_error(s), "");
}

}  // namespace
}  // namespace tessel
