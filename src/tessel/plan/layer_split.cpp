#include "tessel/plan/layer_split.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tessel/core/check.h"

namespace tessel::plan {

double slowest_stage_s(const std::vector<int64_t>& split, const std::vector<double>& layer_s,
                       const std::vector<double>& stage_extra_s) {
  TESSEL_CHECK(split.size() == stage_extra_s.size(), "a split of {} stages priced with {} stage costs", split.size(),
               stage_extra_s.size());
  int64_t layers = 0;
  for (const int64_t n : split) {
    TESSEL_CHECK(n >= 1, "a split with a stage of {} layers (at least one each)", n);
    layers += n;
  }
  TESSEL_CHECK(size_t(layers) == layer_s.size(), "a split of {} layers priced with {} layer costs", layers,
               layer_s.size());
  double slowest = 0;
  size_t l = 0;
  for (size_t s = 0; s < split.size(); ++s) {
    double t = stage_extra_s[s];
    for (int64_t i = 0; i < split[s]; ++i) t += layer_s[l++];
    slowest = std::max(slowest, t);
  }
  return slowest;
}

std::vector<int64_t> balanced_layer_split(const std::vector<double>& layer_s, const std::vector<double>& stage_extra_s,
                                          SplitTies ties) {
  const size_t L = layer_s.size(), P = stage_extra_s.size();
  TESSEL_CHECK(P >= 1 && L >= P, "cannot split {} layers over {} pipeline stages (at least one layer each)", L, P);
  for (const std::vector<double>* v : {&layer_s, &stage_extra_s})
    for (double t : *v) TESSEL_CHECK(std::isfinite(t) && t >= 0, "a layer split priced with a time of {}", t);
  std::vector<double> prefix(L + 1, 0.0);  // prefix[l]: layers [0, l)
  for (size_t l = 0; l < L; ++l) prefix[l + 1] = prefix[l] + layer_s[l];
  const double inf = std::numeric_limits<double>::infinity();
  const auto load = [&](size_t stage, size_t j, size_t l) { return stage_extra_s[stage] + prefix[l] - prefix[j]; };
  // best[s][l]: the smallest largest stage time of layers [0, l) over stages [0, s), each with a layer.
  std::vector<std::vector<double>> best(P + 1, std::vector<double>(L + 1, inf));
  best[0][0] = 0;
  for (size_t s = 1; s <= P; ++s)
    for (size_t l = s; l + (P - s) <= L; ++l)
      for (size_t j = s - 1; j < l; ++j)  // stage s - 1 takes layers [j, l)
        best[s][l] = std::min(best[s][l], std::max(best[s - 1][j], load(s - 1, j, l)));
  // Sums of the same doubles in another order may differ in the last bits: relative tolerances
  // decide ties.
  const double target = best[P][L] * (1 + 1e-12);
  // Among the splits within the target: spread[s][l] as best[s][l], the smallest sum of the stages'
  // penalties (most_even: squared stage times; latest: none, so every split within the target ties).
  const auto penalty = [&](double t) { return ties == SplitTies::most_even ? t * t : 0.0; };
  std::vector<std::vector<double>> spread(P + 1, std::vector<double>(L + 1, inf));
  spread[0][0] = 0;
  for (size_t s = 1; s <= P; ++s)
    for (size_t l = s; l + (P - s) <= L; ++l)
      for (size_t j = s - 1; j < l; ++j)
        if (const double t = load(s - 1, j, l); t <= target)
          spread[s][l] = std::min(spread[s][l], spread[s - 1][j] + penalty(t));
  // Back from the last stage, each taking as many layers as keeps both optima.
  std::vector<int64_t> split(P, 0);
  size_t l = L;
  for (size_t s = P; s >= 1; --s) {
    const double within = spread[s][l] * (1 + 1e-12);
    size_t j = s - 1;  // the earliest start leaves the most layers to this stage
    while (load(s - 1, j, l) > target || spread[s - 1][j] + penalty(load(s - 1, j, l)) > within) {
      ++j;
      TESSEL_CHECK(j < l, "balanced_layer_split: no start for stage {} found again (layers {})", s - 1, l);
    }
    split[s - 1] = int64_t(l - j);
    l = j;
  }
  return split;
}

}  // namespace tessel::plan
