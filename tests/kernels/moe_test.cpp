// MoE routing against a float64 reference written from DeepSeek-V3's formulas (affinities, biased
// top-k selection within the best groups, normalised and scaled gate weights), and the router's
// backward and the sequence-wise balance loss against finite differences of that reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "tessel/core/rng.h"
#include "tessel/kernels/moe.h"

using namespace tessel;

namespace {

struct Ref {
  std::vector<double> s;     // [N, E]
  std::vector<int> chosen;   // [N, k]
  std::vector<double> w;     // [N, k]
};

Ref reference(const kernels::RouterConfig& c, int64_t N, const std::vector<double>& u, const std::vector<double>& bias,
              const std::vector<int>* fixed = nullptr) {
  const int64_t E = c.experts, k = c.topk, G = c.num_groups, per = E / G;
  Ref r{std::vector<double>(size_t(N * E)), std::vector<int>(size_t(N * k)), std::vector<double>(size_t(N * k))};
  for (int64_t t = 0; t < N; ++t) {
    double z = 0;
    for (int64_t e = 0; e < E; ++e) z += std::exp(u[size_t(t * E + e)]);
    for (int64_t e = 0; e < E; ++e)
      r.s[size_t(t * E + e)] = c.sigmoid ? 1 / (1 + std::exp(-u[size_t(t * E + e)])) : std::exp(u[size_t(t * E + e)]) / z;
    std::vector<int> pick;
    if (fixed) {
      pick.assign(fixed->begin() + t * k, fixed->begin() + (t + 1) * k);
    } else {
      std::vector<double> sel(static_cast<size_t>(E));
      for (int64_t e = 0; e < E; ++e) sel[size_t(e)] = r.s[size_t(t * E + e)] + bias[size_t(e)];
      std::vector<std::pair<double, int>> groups;
      for (int g = 0; g < G; ++g) {
        std::vector<double> v(sel.begin() + g * per, sel.begin() + (g + 1) * per);
        std::sort(v.rbegin(), v.rend());
        groups.push_back({v[0] + (per > 1 ? v[1] : 0), g});
      }
      std::stable_sort(groups.begin(), groups.end(), [](auto a, auto b) { return a.first > b.first; });
      std::vector<std::pair<double, int>> cand;
      for (int64_t gi = 0; gi < c.group_topk; ++gi)
        for (int64_t e = 0; e < per; ++e) {
          const int id = int(groups[size_t(gi)].second * per + e);
          cand.push_back({sel[size_t(id)], id});
        }
      std::sort(cand.begin(), cand.end(), [](auto a, auto b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
      for (int64_t j = 0; j < k; ++j) pick.push_back(cand[size_t(j)].second);
    }
    double total = 0;
    for (int e : pick) total += r.s[size_t(t * E + e)];
    for (int64_t j = 0; j < k; ++j) {
      r.chosen[size_t(t * k + j)] = pick[size_t(j)];
      const double sj = r.s[size_t(t * E + pick[size_t(j)])];
      r.w[size_t(t * k + j)] = c.scaling_factor * (c.normalize ? sj / total : sj);
    }
  }
  return r;
}

struct Case {
  bool sigmoid, normalize, bias;
  int64_t groups, group_topk;
};

class RouterTest : public ::testing::TestWithParam<Case> {};

TEST_P(RouterTest, MatchesTheFloat64ReferenceForwardAndBackward) {
  const Case p = GetParam();
  kernels::RouterConfig c;
  c.experts = 8;
  c.topk = 3;
  c.sigmoid = p.sigmoid;
  c.normalize = p.normalize;
  c.scaling_factor = 2.5f;
  c.num_groups = p.groups;
  c.group_topk = p.group_topk;
  const int64_t N = 37, E = c.experts, k = c.topk;
  std::vector<float> u(static_cast<size_t>(N * E)), bias(size_t(E), 0.0f), dw(size_t(N * k));
  for (size_t i = 0; i < u.size(); ++i) u[i] = 2 * philox_normal(21, 1, i);
  if (p.bias)
    for (int64_t e = 0; e < E; ++e) bias[size_t(e)] = 0.2f * philox_normal(21, 2, uint64_t(e));
  for (size_t i = 0; i < dw.size(); ++i) dw[i] = philox_normal(21, 3, i);
  std::vector<float> s(static_cast<size_t>(N * E)), w(size_t(N * k));
  std::vector<int32_t> ch(static_cast<size_t>(N * k));
  kernels::router_forward(c, N, u.data(), p.bias ? bias.data() : nullptr, s.data(), ch.data(), w.data());
  const std::vector<double> ud(u.begin(), u.end()), bd(bias.begin(), bias.end());
  const Ref r = reference(c, N, ud, bd);
  for (int64_t i = 0; i < N * k; ++i) {
    ASSERT_EQ(ch[size_t(i)], r.chosen[size_t(i)]) << "copy " << i;
    EXPECT_NEAR(w[size_t(i)], r.w[size_t(i)], 1e-6);
  }
  // Backward: d(sum dw . w)/du by central differences of the reference, the selection held.
  std::vector<float> ds(static_cast<size_t>(N * E), 0.0f), du(size_t(N * E));
  kernels::router_weights_backward(c, N, s.data(), ch.data(), dw.data(), ds.data());
  kernels::router_scores_backward(c, N, s.data(), ds.data(), du.data());
  auto objective = [&](const std::vector<double>& uu) {
    const Ref q = reference(c, N, uu, bd, &r.chosen);
    double o = 0;
    for (int64_t i = 0; i < N * k; ++i) o += double(dw[size_t(i)]) * q.w[size_t(i)];
    return o;
  };
  for (int64_t i = 0; i < N * E; i += 7) {
    std::vector<double> a = ud, b = ud;
    a[size_t(i)] += 1e-5;
    b[size_t(i)] -= 1e-5;
    EXPECT_NEAR(du[size_t(i)], (objective(a) - objective(b)) / 2e-5, 1e-5) << "logit " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Routers, RouterTest,
                         ::testing::Values(Case{false, true, false, 1, 1}, Case{false, false, false, 1, 1},
                                           Case{true, true, true, 4, 2}, Case{true, false, true, 2, 1}),
                         [](const auto& i) {
                           const Case& c = i.param;
                           return std::string(c.sigmoid ? "sigmoid" : "softmax") + (c.normalize ? "_norm" : "") +
                                  (c.bias ? "_bias" : "") + "_groups" + std::to_string(c.groups);
                         });

TEST(MoeBalance, SequenceLossAndGradientMatchTheFormula) {
  kernels::RouterConfig c;
  c.experts = 6;
  c.topk = 2;
  c.sigmoid = true;
  const int64_t T = 5, N = 2 * T, E = c.experts, k = c.topk;
  std::vector<float> u(static_cast<size_t>(N * E));
  for (size_t i = 0; i < u.size(); ++i) u[i] = philox_normal(22, 1, i);
  std::vector<float> s(static_cast<size_t>(N * E)), w(size_t(N * k)), ds(size_t(N * E), 0.0f);
  std::vector<int32_t> ch(static_cast<size_t>(N * k));
  kernels::router_forward(c, N, u.data(), nullptr, s.data(), ch.data(), w.data());
  const float alpha = 0.3f, scale = 0.7f;
  const double loss = kernels::sequence_balance_loss(c, N, T, alpha, s.data(), ch.data(), scale, ds.data());
  // L = alpha sum_seq sum_i f_i P_i in double; f from the (fixed) selection
  auto L = [&](const std::vector<double>& ss) {
    double total = 0;
    for (int64_t b = 0; b < N / T; ++b)
      for (int64_t e = 0; e < E; ++e) {
        double f = 0, P = 0;
        for (int64_t t = b * T; t < (b + 1) * T; ++t) {
          for (int64_t j = 0; j < k; ++j) f += ch[size_t(t * k + j)] == e ? double(E) / double(k * T) : 0.0;
          double sum = 0;
          for (int64_t x = 0; x < E; ++x) sum += ss[size_t(t * E + x)];
          P += ss[size_t(t * E + e)] / sum / double(T);
        }
        total += alpha * f * P;
      }
    return total;
  };
  const std::vector<double> sd(s.begin(), s.end());
  EXPECT_NEAR(loss, L(sd), 1e-9);
  for (int64_t i = 0; i < N * E; ++i) {
    std::vector<double> a = sd, b = sd;
    a[size_t(i)] += 1e-6;
    b[size_t(i)] -= 1e-6;
    EXPECT_NEAR(ds[size_t(i)], scale * (L(a) - L(b)) / 2e-6, 1e-6) << "score " << i;
  }
}

TEST(MoeOrder, GroupsCopiesByExpertStably) {
  const int32_t chosen[] = {2, 0, 1, 2, 0, 1};  // tokens 0..2, k = 2
  std::vector<int64_t> order, counts;
  kernels::expert_order(3, 2, 3, chosen, order, counts);
  EXPECT_EQ(counts, (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(order, (std::vector<int64_t>{1, 4, 2, 5, 0, 3}));
}

}  // namespace
