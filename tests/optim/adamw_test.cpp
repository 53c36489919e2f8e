// optim::AdamW, the layer over the AdamW kernel (whose formula tests/kernels/adamw_test.cpp checks):
// which parameters decay, the step count behind the bias correction (also after a restore), the
// global gradient norm and clipping against float64, the owned range of a ZeRO shard, and the bf16
// compute copy. The reference is testref::AdamWRef (torch.optim.AdamW in double) fed the fp32
// hyperparameters the kernel sees.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "support/host_access.h"
#include "kernels/reference.h"
#include "tessel/core/rng.h"
#include "tessel/nn/params.h"
#include "tessel/optim/adamw.h"

namespace tessel {
namespace {

using testref::AdamWRef;

double f32(double x) { return double(float(x)); }  // the kernel's hyperparameters are fp32

// Three parameters: a decaying weight, a bias and a norm weight without decay.
struct Store {
  nn::ParamStore ps;
  explicit Store(DType compute = DType::f32) : ps(compute) {
    ps.add("w", {3, 4}, nn::Init::normal, 0.02f, true);
    ps.add("b", {4}, nn::Init::zeros, 0, false);
    ps.add("norm", {5}, nn::Init::ones, 0, true);
    ps.finalize();
    for (int64_t i = 0; i < ps.numel(); ++i) ps.params_data()[i] = 0.5f * philox_normal(3, 1, uint64_t(i));
    ps.refresh_compute_copy();
  }
  void set_grads(uint64_t stream, float scale) {
    for (int64_t i = 0; i < ps.numel(); ++i) ps.grads_data()[i] = scale * philox_normal(3, stream, uint64_t(i));
  }
};

// The reference state of every element, stepped with the per-parameter decay flag.
struct Reference {
  std::vector<double> p, m, v;
  explicit Reference(const nn::ParamStore& ps)
      : p(testref::to_double(ps.params_data(), size_t(ps.numel()))), m(p.size(), 0.0), v(p.size(), 0.0) {}
  void step(const nn::ParamStore& ps, const optim::AdamWConfig& c, double lr, int64_t t, double grad_scale,
            int64_t begin = 0, int64_t end = -1) {
    if (end < 0) end = ps.numel();
    for (const auto& s : ps.specs()) {
      const AdamWRef h{f32(lr), f32(c.beta1), f32(c.beta2), f32(c.eps), s.weight_decay ? f32(c.weight_decay) : 0.0};
      for (int64_t i = std::max(begin, s.offset); i < std::min(end, s.offset + s.numel); ++i)
        h.step(t, double(ps.grads_data()[i]) * grad_scale, p[size_t(i)], m[size_t(i)], v[size_t(i)]);
    }
  }
};

void expect_params(const nn::ParamStore& ps, const Reference& r, const std::string& what) {
  EXPECT_TRUE(testref::all_close(testref::to_double(ps.params_data(), size_t(ps.numel())), r.p,
                                 testref::Tol<float>::rel, what));
}

TEST(OptimAdamW, DecayOnlyWhereRegisteredAndBiasCorrectionCountsSteps) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  Store st;
  optim::AdamWConfig cfg;
  cfg.weight_decay = 0.5;  // large, so a decay applied to the wrong parameter shows at O(1)
  cfg.clip_grad = 0;
  optim::AdamW opt(st.ps, cfg);
  Reference ref(st.ps);
  const double lrs[] = {0.0, 1e-2, 3e-2, 2e-2};  // a warm-up's first step at lr 0 moves nothing
  for (int64_t t = 1; t <= 4; ++t) {
    st.set_grads(10 + uint64_t(t), 1.0f);
    opt.step(lrs[t - 1]);
    EXPECT_EQ(opt.steps_taken(), t);
    ref.step(st.ps, cfg, lrs[t - 1], t, 1.0);
    expect_params(st.ps, ref, "step " + std::to_string(t));
  }
}

// A restored optimizer (set_steps_taken, moments loaded) continues with the bias correction of the
// step count it was saved at (t = 4 here), not of step 1, and matches the run that never stopped.
TEST(OptimAdamW, RestoredStepCountDrivesTheBiasCorrection) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  Store a, b;
  optim::AdamWConfig cfg;
  cfg.clip_grad = 0;
  optim::AdamW oa(a.ps, cfg), ob(b.ps, cfg);
  for (int64_t t = 1; t <= 3; ++t) {
    a.set_grads(20 + uint64_t(t), 1.0f);
    oa.step(1e-2);
  }
  const size_t n = size_t(a.ps.numel());
  std::copy_n(a.ps.params_data(), n, b.ps.params_data());
  std::copy_n(oa.exp_avg_data(), n, ob.exp_avg_data());
  std::copy_n(oa.exp_avg_sq_data(), n, ob.exp_avg_sq_data());
  ob.set_steps_taken(3);
  Reference ref(b.ps);
  ref.m = testref::to_double(ob.exp_avg_data(), n);
  ref.v = testref::to_double(ob.exp_avg_sq_data(), n);
  a.set_grads(30, 1.0f);
  b.set_grads(30, 1.0f);
  oa.step(1e-2);
  ob.step(1e-2);
  EXPECT_EQ(ob.steps_taken(), 4);
  ref.step(b.ps, cfg, 1e-2, 4, 1.0);
  expect_params(b.ps, ref, "restored, step 4");
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(a.ps.params_data()[i], b.ps.params_data()[i]) << i;
}

// The returned norm is the float64 norm of every gradient; above clip_grad the update sees
// g * clip / (norm + 1e-6) (torch's clip_grad_norm_), below it g itself; the stored gradients keep
// their values. Adam is nearly invariant to the gradient's scale, so the scale is checked where it
// is not: the first moment m = (1 - b1) g_used, and the update with a large eps.
TEST(OptimAdamW, GlobalNormAndClippingAgainstFloat64) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  for (const double clip : {0.0, 1.0, 1e3}) {
    SCOPED_TRACE(clip);
    Store st;
    optim::AdamWConfig cfg;
    cfg.clip_grad = clip;
    cfg.eps = 0.5;  // comparable to |g|: the update depends on the gradient's scale
    optim::AdamW opt(st.ps, cfg);
    Reference ref(st.ps);
    st.set_grads(40, 3.0f);
    const std::vector<float> g(st.ps.grads_data(), st.ps.grads_data() + st.ps.numel());
    double sq = 0;
    for (float x : g) sq += double(x) * double(x);
    const double norm = std::sqrt(sq);
    ASSERT_GT(norm, 1.0);
    ASSERT_LT(norm, 1e3);
    const double used = clip > 0 && clip / (norm + 1e-6) < 1 ? clip / (norm + 1e-6) : 1.0;
    EXPECT_NEAR(opt.step(1e-2), norm, 1e-12 * norm);
    ref.step(st.ps, cfg, 1e-2, 1, double(float(used)));
    expect_params(st.ps, ref, "params");
    for (int64_t i = 0; i < st.ps.numel(); ++i) {
      EXPECT_NEAR(opt.exp_avg_data()[i], (1 - f32(cfg.beta1)) * double(g[size_t(i)]) * used, 1e-6 * std::fabs(g[size_t(i)]))
          << i;
      ASSERT_EQ(st.ps.grads_data()[i], g[size_t(i)]) << "stored gradient " << i << " changed";
    }
  }
}

// A tied copy (the embedding on the last pipeline stage) and a key/value replica other than number 0
// are not counted in the norm: their gradients are another parameter's.
TEST(OptimAdamW, NormSkipsTiedCopiesAndReplicas) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  Store st;
  st.set_grads(50, 1.0f);
  const auto& specs = st.ps.specs();
  st.ps.mark_tied_copy(specs[1].offset);       // "b"
  st.ps.set_replica(specs[2].offset, 2, 1);    // "norm", replica 1 of 2
  double sq = 0;
  for (int64_t i = 0; i < specs[0].numel; ++i) sq += double(st.ps.grads_data()[i]) * double(st.ps.grads_data()[i]);
  optim::AdamW opt(st.ps, {});
  EXPECT_NEAR(opt.step(1e-3), std::sqrt(sq), 1e-12 * std::sqrt(sq));
}

// Their values stay out of the norm, but a NaN or an Inf among them does not: the rank updates with
// them (a DualPipe mirror's stages are all tied copies), so the norm every rank decides a skip by
// must show it. Finite, they leave the norm as it was to the last bit.
TEST(OptimAdamW, ANonFiniteGradientOutsideTheNormMakesItNonFinite) {
  const tessel::testing::HostAccess host;
  // The norm of one step with "b" a tied copy and "norm" replica 1 of 2, element 1 of parameter
  // `which` set to `value` first (which < 0: nothing changed).
  const auto norm_with = [](int which, float value) {
    Store st;
    st.set_grads(50, 1.0f);
    const auto& specs = st.ps.specs();
    st.ps.mark_tied_copy(specs[1].offset);
    st.ps.set_replica(specs[2].offset, 2, 1);
    if (which >= 0) st.ps.grads_data()[specs[size_t(which)].offset + 1] = value;
    optim::AdamW opt(st.ps, {});
    return opt.step(1e-3);
  };
  const double expected = norm_with(-1, 0);
  ASSERT_TRUE(std::isfinite(expected));
  for (const int which : {1, 2}) {  // the tied copy, the replica
    EXPECT_TRUE(std::isnan(norm_with(which, std::numeric_limits<float>::quiet_NaN()))) << which;
    EXPECT_TRUE(std::isnan(norm_with(which, std::numeric_limits<float>::infinity()))) << which;
    EXPECT_EQ(norm_with(which, 3e38f), expected) << which;  // finite, however large: no change
  }
  EXPECT_NE(norm_with(0, 3e38f), expected);  // a counted parameter does count
}

// A ZeRO shard owns [begin, end), here cutting "w" and "norm" in the middle: exactly that range
// moves, each part with its own parameter's decay flag; the norm (with no shard group) is that of
// the owned gradients.
TEST(OptimAdamW, ShardUpdatesOnlyItsOwnedRange) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  Store st;
  const int64_t begin = 7, end = 18;  // w is [0, 12), b [12, 16), norm [16, 21)
  optim::AdamWConfig cfg;
  cfg.weight_decay = 0.5;
  cfg.clip_grad = 0;
  optim::AdamW opt(st.ps, cfg, begin, end);
  Reference ref(st.ps);
  st.set_grads(60, 1.0f);
  double sq = 0;
  for (int64_t i = begin; i < end; ++i) sq += double(st.ps.grads_data()[i]) * double(st.ps.grads_data()[i]);
  EXPECT_NEAR(opt.step(2e-2), std::sqrt(sq), 1e-12 * std::sqrt(sq));
  ref.step(st.ps, cfg, 2e-2, 1, 1.0, begin, end);
  expect_params(st.ps, ref, "shard");
  const float* p = st.ps.params_data();
  for (int64_t i = 0; i < st.ps.numel(); ++i) {
    if (i >= begin && i < end) continue;
    EXPECT_EQ(double(p[i]), ref.p[size_t(i)]) << "element " << i << " outside the shard moved";
  }
}

// Under bf16 compute the update also rewrites the bf16 copy the GEMMs read: it equals the rounded
// fp32 master weights, and the store's version moves on (cached FP8 weights are remade).
TEST(OptimAdamW, Bf16ComputeCopyFollowsTheMasterWeights) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  Store st(DType::bf16);
  optim::AdamW opt(st.ps, {});
  st.set_grads(70, 1.0f);
  const uint64_t version = st.ps.version();
  opt.step(5e-2);
  EXPECT_GT(st.ps.version(), version);
  const bf16* copy = st.ps.compute_at(0, {st.ps.numel()}).data<bf16>();
  for (int64_t i = 0; i < st.ps.numel(); ++i)
    ASSERT_EQ(float(copy[i]), testref::round_bf16(st.ps.params_data()[i])) << i;
}

}  // namespace
}  // namespace tessel
