#include "tessel/kernels/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "tessel/core/check.h"

namespace tessel::kernels {

void router_forward(const RouterConfig& c, int64_t N, const float* logits, const float* bias, float* scores,
                    int32_t* chosen, float* weights) {
  const int64_t E = c.experts, k = c.topk, G = c.num_groups, per_group = E / G;
  TESSEL_CHECK(k >= 1 && k <= E && G >= 1 && E % G == 0 && c.group_topk >= 1 && c.group_topk <= G &&
                   k <= c.group_topk * per_group,
               "router: top-{} of {} experts in the best {} of {} groups is not possible", k, E, c.group_topk, G);
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < N; ++t) {
    const float* u = logits + t * E;
    float* s = scores + t * E;
    if (c.sigmoid) {
      for (int64_t e = 0; e < E; ++e) s[e] = 1.0f / (1.0f + std::exp(-u[e]));
    } else {
      const float mx = *std::max_element(u, u + E);
      float sum = 0;
      for (int64_t e = 0; e < E; ++e) sum += (s[e] = std::exp(u[e] - mx));
      for (int64_t e = 0; e < E; ++e) s[e] /= sum;
    }
    std::vector<float> sel(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) sel[size_t(e)] = s[e] + (bias ? bias[e] : 0.0f);
    if (G > 1) {  // keep the best group_topk groups by the sum of each group's two best scores
      std::vector<std::pair<float, int64_t>> gs;
      for (int64_t g = 0; g < G; ++g) {
        std::vector<float> v(sel.begin() + g * per_group, sel.begin() + (g + 1) * per_group);
        std::partial_sort(v.begin(), v.begin() + std::min<int64_t>(2, per_group), v.end(), std::greater<float>());
        gs.emplace_back(v[0] + (per_group > 1 ? v[1] : 0.0f), g);
      }
      std::stable_sort(gs.begin(), gs.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
      for (int64_t r = c.group_topk; r < G; ++r)
        for (int64_t e = 0; e < per_group; ++e) sel[size_t(gs[size_t(r)].second * per_group + e)] = -INFINITY;
    }
    std::vector<int32_t> idx(static_cast<size_t>(E));
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
      return sel[size_t(a)] > sel[size_t(b)] || (sel[size_t(a)] == sel[size_t(b)] && a < b);
    });
    float total = 0;
    for (int64_t j = 0; j < k; ++j) total += s[idx[size_t(j)]];
    for (int64_t j = 0; j < k; ++j) {
      chosen[t * k + j] = idx[size_t(j)];
      weights[t * k + j] = c.scaling_factor * (c.normalize ? s[idx[size_t(j)]] / total : s[idx[size_t(j)]]);
    }
  }
}

void router_weights_backward(const RouterConfig& c, int64_t N, const float* scores, const int32_t* chosen,
                             const float* dweights, float* dscores) {
  const int64_t E = c.experts, k = c.topk;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < N; ++t) {
    const float* s = scores + t * E;
    const int32_t* ch = chosen + t * k;
    const float* dw = dweights + t * k;
    float* ds = dscores + t * E;
    if (!c.normalize) {
      for (int64_t j = 0; j < k; ++j) ds[ch[j]] += c.scaling_factor * dw[j];
      continue;
    }
    // w_j = c s_j / S, S = sum of the chosen s: dw/ds_j = c (dw_j - sum_l dw_l s_l / S) / S
    float S = 0, dot = 0;
    for (int64_t j = 0; j < k; ++j) {
      S += s[ch[j]];
      dot += dw[j] * s[ch[j]];
    }
    for (int64_t j = 0; j < k; ++j) ds[ch[j]] += c.scaling_factor * (dw[j] - dot / S) / S;
  }
}

void router_scores_backward(const RouterConfig& c, int64_t N, const float* scores, const float* dscores,
                            float* dlogits) {
  const int64_t E = c.experts;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < N; ++t) {
    const float* s = scores + t * E;
    const float* ds = dscores + t * E;
    float* du = dlogits + t * E;
    if (c.sigmoid) {
      for (int64_t e = 0; e < E; ++e) du[e] = ds[e] * s[e] * (1.0f - s[e]);
    } else {
      float dot = 0;
      for (int64_t e = 0; e < E; ++e) dot += ds[e] * s[e];
      for (int64_t e = 0; e < E; ++e) du[e] = s[e] * (ds[e] - dot);
    }
  }
}

void balance_counts(const RouterConfig& c, int64_t N, const int64_t* row_seq, const int32_t* chosen, float* counts) {
  const int64_t E = c.experts, k = c.topk;
  for (int64_t t = 0; t < N; ++t)
    for (int64_t j = 0; j < k; ++j) counts[row_seq[t] * E + chosen[t * k + j]] += 1.0f;
}

double balance_loss_rows(const RouterConfig& c, int64_t N, const int64_t* row_seq, int64_t T, float alpha,
                         const float* scores, const float* counts, float grad_scale, float* dscores) {
  const int64_t E = c.experts, k = c.topk;
  // L = alpha sum_seq sum_i f_i P_i = sum_t (alpha / T) sum_i f[seq(t), i] s'[t, i]: a sum over rows.
  const double fscale = double(E) / double(k * T);
  double loss = 0;
  for (int64_t t = 0; t < N; ++t) {
    const float* cnt = counts + row_seq[t] * E;
    const float* st = scores + t * E;
    double sum = 0, dot = 0;
    for (int64_t e = 0; e < E; ++e) sum += st[e];
    for (int64_t e = 0; e < E; ++e) dot += double(alpha) * fscale * double(cnt[e]) / double(T) * st[e] / sum;
    loss += dot;
    // dL/ds'[t, i] = alpha f_i / T; through s' = s / sum_j s: ds_i = (g_i - sum_j g_j s'_j) / sum_j s_j
    for (int64_t e = 0; e < E; ++e)
      dscores[t * E + e] += float(grad_scale * (double(alpha) * fscale * double(cnt[e]) / double(T) - dot) / sum);
  }
  return loss;
}

double sequence_balance_loss(const RouterConfig& c, int64_t N, int64_t T, float alpha, const float* scores,
                             const int32_t* chosen, float grad_scale, float* dscores) {
  TESSEL_CHECK(N % T == 0, "balance loss: {} rows are not whole sequences of {}", N, T);
  std::vector<int64_t> row_seq(static_cast<size_t>(N));
  for (int64_t t = 0; t < N; ++t) row_seq[size_t(t)] = t / T;
  std::vector<float> counts(static_cast<size_t>(N / T * c.experts), 0.0f);
  balance_counts(c, N, row_seq.data(), chosen, counts.data());
  return balance_loss_rows(c, N, row_seq.data(), T, alpha, scores, counts.data(), grad_scale, dscores);
}

void expert_order(int64_t N, int64_t k, int64_t E, const int32_t* chosen, std::vector<int64_t>& order,
                  std::vector<int64_t>& counts) {
  counts.assign(static_cast<size_t>(E), 0);
  for (int64_t i = 0; i < N * k; ++i) ++counts[size_t(chosen[i])];
  std::vector<int64_t> next(static_cast<size_t>(E), 0);
  for (int64_t e = 1; e < E; ++e) next[size_t(e)] = next[size_t(e - 1)] + counts[size_t(e - 1)];
  order.assign(static_cast<size_t>(N * k), 0);
  for (int64_t i = 0; i < N * k; ++i) order[size_t(next[size_t(chosen[i])]++)] = i;
}

double router_z_loss(int64_t N, int64_t E, const float* logits, float coeff, float grad_scale, float* daux) {
  double aux = 0;
  for (int64_t t = 0; t < N; ++t) {
    const float* u = logits + t * E;
    const float mx = *std::max_element(u, u + E);
    double sum = 0;
    for (int64_t e = 0; e < E; ++e) sum += std::exp(double(u[e] - mx));
    const double lse = double(mx) + std::log(sum);
    aux += double(coeff) * lse * lse * double(grad_scale);
    for (int64_t e = 0; e < E; ++e)
      daux[t * E + e] += float(2.0 * double(coeff) * lse * std::exp(double(u[e]) - lse) * double(grad_scale));
  }
  return aux;
}

void gather_rows(int64_t n, size_t row_bytes, const void* src, const int64_t* index, void* out) {
  const auto* s = static_cast<const char*>(src);
  auto* o = static_cast<char*>(out);
  for (int64_t p = 0; p < n; ++p) std::memcpy(o + size_t(p) * row_bytes, s + size_t(index[p]) * row_bytes, row_bytes);
}

void scatter_add_rows(int64_t n, int64_t d, const float* src, const int64_t* index, float* out) {
  for (int64_t p = 0; p < n; ++p)
    for (int64_t i = 0; i < d; ++i) out[index[p] * d + i] += src[p * d + i];
}

void moe_weighted_sum(int64_t n, int64_t d, int64_t k, const float* outputs, const int64_t* copies,
                      const float* weights, float* out) {
  for (int64_t p = 0; p < n; ++p) {
    const int64_t c = copies[p], t = c / k;
    for (int64_t i = 0; i < d; ++i) out[t * d + i] += weights[c] * outputs[p * d + i];
  }
}

void moe_weighted_sum_backward(int64_t n, int64_t d, int64_t k, const float* dout, const float* outputs,
                               const int64_t* copies, const float* weights, float* dweights, float* dcopy) {
  for (int64_t p = 0; p < n; ++p) {
    const int64_t c = copies[p], t = c / k;
    const float* g = dout + t * d;
    const float* o = outputs + p * d;
    float* dc = dcopy + p * d;
    double dot = 0;
    for (int64_t i = 0; i < d; ++i) {
      dot += double(g[i]) * double(o[i]);
      dc[i] = weights[c] * g[i];
    }
    dweights[c] = float(dot);
  }
}

}  // namespace tessel::kernels
