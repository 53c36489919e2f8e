// Fused softmax cross-entropy against a double reference: summed loss, per-row loss and dlogits,
// ignored rows (negative targets), in-place gradient (dlogits aliasing logits), bf16 dlogits, large
// logits, and the target range check.
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "kernels/reference.h"
#include "tessel/core/check.h"
#include "tessel/kernels/xent.h"

namespace tessel {
namespace {

using testref::Rand;
using testref::sz;
using testref::Tol;

enum class Mode { f32, f32_inplace, bf16 };

std::vector<int64_t> make_targets(int64_t N, int64_t V, Rand& rng) {
  std::vector<int64_t> t(sz(N));
  for (int64_t i = 0; i < N; ++i) {
    t[sz(i)] = rng.integer(0, V - 1);
    if (i % 4 == 3) t[sz(i)] = -1;     // ignored
    if (i % 11 == 5) t[sz(i)] = -100;  // PyTorch's ignore_index is negative too
    if (i % 7 == 2) t[sz(i)] = V - 1;  // last class
  }
  return t;
}

template <class Tg>
void check_xent(int64_t N, int64_t V, bool inplace, std::vector<float> logits, const std::vector<int64_t>& targets) {
  const float grad_scale = 0.37f;
  std::vector<double> rgrad(sz(N * V)), rrow(sz(N));
  double rtotal = 0;
  for (int64_t i = 0; i < N; ++i) {
    rrow[sz(i)] = testref::xent_row(V, logits.data() + i * V, targets[sz(i)], grad_scale, rgrad.data() + i * V);
    rtotal += rrow[sz(i)];
  }

  std::vector<float> row_loss(sz(N), -1.0f);
  // Forward only gives the same loss.
  const double fwd_only = kernels::softmax_xent<Tg>(N, V, logits.data(), targets.data(), grad_scale, nullptr);
  double total = 0;
  std::vector<double> got;
  if (inplace) {
    if constexpr (std::is_same_v<Tg, float>) {
      total = kernels::softmax_xent<float>(N, V, logits.data(), targets.data(), grad_scale, logits.data(),
                                           row_loss.data());
      got = testref::to_double(logits);
    }
  } else {
    std::vector<Tg> d(sz(N * V));
    for (auto& x : d) testref::store_d(&x, 5.0);  // junk: must be overwritten everywhere
    total = kernels::softmax_xent<Tg>(N, V, logits.data(), targets.data(), grad_scale, d.data(), row_loss.data());
    got = testref::to_double(d);
  }
  EXPECT_TRUE(std::isfinite(total));
  EXPECT_TRUE(testref::all_close({total}, {rtotal}, Tol<float>::rel, "loss sum"));
  EXPECT_TRUE(testref::all_close({fwd_only}, {rtotal}, Tol<float>::rel, "loss sum (forward only)"));
  EXPECT_TRUE(testref::all_close(testref::to_double(row_loss), rrow, Tol<float>::rel, "row loss"));
  EXPECT_TRUE(testref::all_close(got, rgrad, Tol<Tg>::rel, "dlogits"));
  for (int64_t i = 0; i < N; ++i)
    if (targets[sz(i)] < 0) {
      EXPECT_EQ(row_loss[sz(i)], 0.0f) << "ignored row " << i;
      for (int64_t j = 0; j < V; ++j) ASSERT_EQ(got[sz(i * V + j)], 0.0) << "ignored row " << i << " col " << j;
    }
}

class XentTest : public ::testing::TestWithParam<std::tuple<Mode, int64_t, int64_t>> {};

TEST_P(XentTest, MatchesReference) {
  const auto [mode, N, V] = GetParam();
  Rand rng(uint64_t(N * 10007 + V));
  const std::vector<float> logits = rng.normals(sz(N * V), 3.0);
  const std::vector<int64_t> targets = make_targets(N, V, rng);
  if (mode == Mode::bf16)
    check_xent<bf16>(N, V, false, logits, targets);
  else
    check_xent<float>(N, V, mode == Mode::f32_inplace, logits, targets);
}

std::string xent_name(const ::testing::TestParamInfo<XentTest::ParamType>& info) {
  const auto& [mode, N, V] = info.param;
  return std::string(mode == Mode::f32 ? "f32" : mode == Mode::f32_inplace ? "f32_inplace" : "bf16") + "_N" +
         std::to_string(N) + "_V" + std::to_string(V);
}
INSTANTIATE_TEST_SUITE_P(Grid, XentTest,
                         ::testing::Combine(::testing::Values(Mode::f32, Mode::f32_inplace, Mode::bf16),
                                            ::testing::Values<int64_t>(1, 3, 17, 65),
                                            ::testing::Values<int64_t>(1, 3, 17, 63, 64, 65, 130, 1000)),
                         xent_name);

// Logits of +-80: exp(160) overflows fp32, so only a max-subtracted softmax stays finite.
TEST(Xent, LargeLogitsStayFinite) {
  const int64_t N = 6, V = 50;
  Rand rng(11);
  std::vector<float> logits(sz(N * V));
  for (auto& x : logits) x = rng.uniform(0, 1) < 0.5 ? -80.0f : 80.0f;
  for (int64_t j = 0; j < V; ++j) logits[sz(2 * V + j)] = 80.0f - 0.5f * float(j);  // graded row
  std::vector<int64_t> targets = {0, 1, 2, 3, 4, 5};
  logits[sz(0 * V + 0)] = -80.0f;  // target at the minimum: loss ~160
  logits[sz(1 * V + 1)] = 80.0f;   // target at the maximum
  for (bool inplace : {false, true}) {
    SCOPED_TRACE(inplace);
    check_xent<float>(N, V, inplace, logits, targets);
  }
  check_xent<bf16>(N, V, false, logits, targets);
  const double loss = kernels::softmax_xent<float>(N, V, logits.data(), targets.data(), 1.0f, nullptr);
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_GT(loss, 150.0);
}

// A single-class vocabulary has zero loss and zero gradient.
TEST(Xent, SingleClass) {
  const std::vector<float> logits = {3.5f, -2.0f};
  const std::vector<int64_t> targets = {0, 0};
  std::vector<float> d(2, 9.0f);
  EXPECT_NEAR(kernels::softmax_xent<float>(2, 1, logits.data(), targets.data(), 1.0f, d.data()), 0.0, 1e-6);
  EXPECT_NEAR(d[0], 0.0f, 1e-6);
  EXPECT_NEAR(d[1], 0.0f, 1e-6);
}

TEST(Xent, TargetOutOfRangeThrows) {
  const int64_t V = 8;
  std::vector<float> logits(3 * V, 0.0f), d(3 * V);
  std::vector<int64_t> targets = {1, V, 2};
  EXPECT_THROW(kernels::softmax_xent<float>(3, V, logits.data(), targets.data(), 1.0f, d.data()), Error);
  targets[1] = V + 1000;
  EXPECT_THROW(kernels::softmax_xent<float>(3, V, logits.data(), targets.data(), 1.0f, nullptr), Error);
  targets[1] = V - 1;
  EXPECT_NO_THROW(kernels::softmax_xent<float>(3, V, logits.data(), targets.data(), 1.0f, d.data()));
  // log(V) for uniform logits.
  EXPECT_NEAR(kernels::softmax_xent<float>(3, V, logits.data(), targets.data(), 1.0f, nullptr), 3 * std::log(8.0),
              1e-5);
}

}  // namespace
}  // namespace tessel
