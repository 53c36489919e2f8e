// The data-parallel gradient reducer and the optimizer's global gradient norm over real ranks (np 2,
// 4, 8), against float64 computed here from every rank's known gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "support/host_access.h"
#include "mpi/mpi_world.h"
#include "tessel/core/rng.h"
#include "tessel/nn/params.h"
#include "tessel/optim/adamw.h"
#include "tessel/optim/grad_reducer.h"

using namespace tessel;

namespace {

using tessel::testing::world;

// Rank r's gradient element i: normal values spread over six decades, so a sum's rounding is
// checked at every magnitude (not only relative to the largest element).
float grad_of(int r, int64_t i) {
  const double decade = std::floor(6.0 * philox_uniform(21, uint64_t(i), 0));
  return float(philox_normal(21, uint64_t(r) + 1, uint64_t(i)) * std::pow(10.0, decade - 4.0));
}

// Reports [0, n) last first in ranges of uneven lengths (1 to 97 elements), as backward does.
void report_backwards(optim::GradReducer& r, int64_t n) {
  for (int64_t end = n, k = 0; end > 0; ++k) {
    const int64_t len = std::min(end, 1 + (k * 37) % 97);
    r.ready(end - len, end);
    end -= len;
  }
}

// Every element is the float64 sum of the ranks' gradients within the bound of an fp32 sum of W terms
// in any order, (W - 1) u sum_r |g_r| (u = 2^-24, first order; the 1.01 covers the second), and
// every rank holds the same bits (data-parallel replicas must stay identical).
TEST(MpiGradReducer, SumsAgainstFloat64InEveryBucketing) {
  auto& w = world();
  const int W = w.size();
  const int64_t n = 3001;
  for (const int64_t bucket : {int64_t(1), int64_t(96), int64_t(97), int64_t(1000), int64_t(4000000)}) {
    SCOPED_TRACE(bucket);
    std::vector<float> g(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) g[size_t(i)] = grad_of(w.rank(), i);
    optim::GradReducer reducer(w, Tensor::from_blob(g.data(), {int64_t(g.size())}, DType::f32), bucket);
    report_backwards(reducer, n);
    reducer.finish();
    for (int64_t i = 0; i < n; ++i) {
      double sum = 0, abs_sum = 0;
      for (int r = 0; r < W; ++r) {
        sum += double(grad_of(r, i));
        abs_sum += std::fabs(double(grad_of(r, i)));
      }
      const double bound = 1.01 * double(W - 1) * std::ldexp(1.0, -24) * abs_sum;
      ASSERT_LE(std::fabs(double(g[size_t(i)]) - sum), bound) << "element " << i << " of " << n;
    }
    std::vector<float> all(size_t(n) * size_t(W));
    w.all_gather(g.data(), all.data(), n, DType::f32);
    for (int r = 1; r < W; ++r)
      ASSERT_EQ(std::memcmp(all.data(), all.data() + size_t(r) * size_t(n), size_t(n) * sizeof(float)), 0)
          << "rank " << r << " holds other reduced gradients than rank 0";
  }
}

// Integers: the sum is exact whatever the order, so the result must equal it to the bit; the
// elements outside the reported ranges are not touched.
TEST(MpiGradReducer, ExactSumsAndUnreportedElementsUntouched) {
  auto& w = world();
  const int W = w.size();
  std::vector<float> g(200);
  for (size_t i = 0; i < g.size(); ++i) g[i] = float(int(i % 7) - 3 + w.rank());
  optim::GradReducer reducer(w, Tensor::from_blob(g.data(), {int64_t(g.size())}, DType::f32), 16);
  reducer.ready(150, 200);
  reducer.ready(100, 150);
  reducer.ready(10, 60);  // [60, 100) and [0, 10) never reported
  reducer.finish();
  for (size_t i = 0; i < g.size(); ++i) {
    const bool reported = (i >= 10 && i < 60) || i >= 100;
    const float mine = float(int(i % 7) - 3 + w.rank());
    const float sum = float(W * (int(i % 7) - 3) + W * (W - 1) / 2);
    ASSERT_EQ(g[i], reported ? sum : mine) << i;
  }
}

double squares(const float* g, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(g[i]) * double(g[i]);
  return s;
}

// ZeRO-1: each rank owns one contiguous shard of the same parameters (and holds the reduced
// gradients of it); the norm AdamW returns, on every rank, is that of the whole gradient, the same
// double on every rank, and clipping scales every shard by the same factor.
TEST(MpiGradReducer, ShardedOptimizerNormIsTheWholeGradientsNorm) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  auto& w = world();
  const int W = w.size();
  nn::ParamStore ps(DType::f32);
  ps.add("w", {13, 11}, nn::Init::zeros, 0, true);
  ps.add("b", {11}, nn::Init::zeros, 0, false);
  ps.finalize();
  const int64_t n = ps.numel();
  for (int64_t i = 0; i < n; ++i) ps.grads_data()[i] = grad_of(0, i) * 1e3f;  // the reduced gradient
  const double whole = std::sqrt(squares(ps.grads_data(), n));
  const int64_t begin = n * w.rank() / W, end = n * (w.rank() + 1) / W;
  optim::AdamWConfig cfg;
  cfg.clip_grad = 1.0;
  optim::AdamW opt(ps, cfg, begin, end, optim::NormGroups{&w});
  const double norm = opt.step(1e-3);
  EXPECT_NEAR(norm, whole, 1e-12 * whole);
  std::vector<double> norms(static_cast<size_t>(W));
  w.all_gather(&norm, norms.data(), 1, DType::i64);  // 8-byte words: the bits of each rank's double
  for (int r = 0; r < W; ++r) EXPECT_EQ(norms[size_t(r)], norm) << "rank " << r;
  // The clipped first moment of every owned element: (1 - b1) g clip / (norm + 1e-6).
  const double coef = double(float(cfg.clip_grad / (whole + 1e-6)));
  for (int64_t i = begin; i < end; ++i)
    ASSERT_NEAR(opt.exp_avg_data()[i - begin], (1 - double(float(cfg.beta1))) * double(ps.grads_data()[i]) * coef,
                1e-6 * std::fabs(ps.grads_data()[i]) * coef)
        << i;
}

// Tensor parallelism: a parameter replicated on every rank counts once (rank 0's), the shards of a
// split one add up.
TEST(MpiGradReducer, TensorParallelNormCountsReplicatedParametersOnce) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  auto& w = world();
  const int W = w.size();
  nn::ParamStore ps(DType::f32);
  const int64_t shard = ps.add_shard("w", {int64_t(W) * 4, 3}, 0, w.rank(), W, nn::Init::zeros, 0, true);
  const int64_t norm_w = ps.add("norm", {8}, nn::Init::ones, 0, false);
  ps.finalize();
  for (int64_t i = 0; i < 12; ++i) ps.grads_data()[shard + i] = grad_of(w.rank(), i);
  for (int64_t i = 0; i < 8; ++i) ps.grads_data()[norm_w + i] = grad_of(100, i);  // identical on every rank
  double sq = 0;
  for (int r = 0; r < W; ++r)
    for (int64_t i = 0; i < 12; ++i) sq += double(grad_of(r, i)) * double(grad_of(r, i));
  for (int64_t i = 0; i < 8; ++i) sq += double(grad_of(100, i)) * double(grad_of(100, i));
  optim::AdamW opt(ps, {}, 0, -1, optim::NormGroups{nullptr, &w});
  EXPECT_NEAR(opt.step(1e-3), std::sqrt(sq), 1e-12 * std::sqrt(sq));
}

}  // namespace
