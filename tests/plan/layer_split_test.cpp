// balanced_layer_split against every split there is: for small layer and stage counts each
// composition of the layers into stages is priced by hand here, and the function's split must be as
// fast as the fastest of them and, among those as fast, the one its tie rule names.
#include <gtest/gtest.h>

#include <random>

#include "support/error_of.h"
#include "tessel/plan/layer_split.h"

using namespace tessel;
using namespace tessel::plan;
using tessel::testing::error_of;

namespace {

// Every split of `layers` over `stages` stages with at least one layer each, in lexicographic order.
void every_split(int64_t layers, size_t stages, std::vector<int64_t>& prefix, std::vector<std::vector<int64_t>>& out) {
  if (prefix.size() + 1 == stages) {
    prefix.push_back(layers);
    out.push_back(prefix);
    prefix.pop_back();
    return;
  }
  for (int64_t n = 1; n <= layers - int64_t(stages - prefix.size() - 1); ++n) {
    prefix.push_back(n);
    every_split(layers - n, stages, prefix, out);
    prefix.pop_back();
  }
}

// The largest stage time of a split (first) and the sum of its squared stage times (second).
std::pair<double, double> stage_times(const std::vector<int64_t>& split, const std::vector<double>& layer_s,
                                      const std::vector<double>& extra_s) {
  double slowest = 0, squares = 0;
  size_t l = 0;
  for (size_t s = 0; s < split.size(); ++s) {
    double t = extra_s[s];
    for (int64_t i = 0; i < split[s]; ++i) t += layer_s[l++];
    slowest = std::max(slowest, t);
    squares += t * t;
  }
  return {slowest, squares};
}

TEST(LayerSplit, IsTheFastestOfEverySplitAndOfThoseTheTieEachRuleNames) {
  std::mt19937 rng(7);
  // Small integers: many ties, so the tie rules are exercised; exact in doubles, so "as fast" is exact.
  std::uniform_int_distribution<int> cost(0, 6);
  int cases = 0, moved = 0, rules_differ = 0;
  for (size_t stages = 1; stages <= 5; ++stages)
    for (int64_t layers = int64_t(stages); layers <= 10; ++layers)
      for (int trial = 0; trial < 12; ++trial, ++cases) {
        std::vector<double> layer_s(static_cast<size_t>(layers)), extra_s(stages);
        for (double& t : layer_s) t = cost(rng);
        for (double& t : extra_s) t = 2 * cost(rng);
        std::vector<std::vector<int64_t>> all;
        std::vector<int64_t> prefix;
        every_split(layers, stages, prefix, all);
        double fastest = 1e300, most_even = 1e300;
        for (const auto& s : all) fastest = std::min(fastest, stage_times(s, layer_s, extra_s).first);
        for (const auto& s : all)
          if (stage_times(s, layer_s, extra_s).first == fastest)
            most_even = std::min(most_even, stage_times(s, layer_s, extra_s).second);
        // Among the candidates, the last stage's layers as many as possible, then the stage before
        // it's, ...: the largest split read backwards.
        const auto latest_of = [&](bool even_only) {
          std::vector<int64_t> pick;
          for (const auto& s : all) {
            const auto [slowest, squares] = stage_times(s, layer_s, extra_s);
            if (slowest != fastest || (even_only && squares != most_even)) continue;
            if (pick.empty() ||
                std::vector<int64_t>(s.rbegin(), s.rend()) > std::vector<int64_t>(pick.rbegin(), pick.rend()))
              pick = s;
          }
          return pick;
        };
        const std::vector<int64_t> latest = balanced_layer_split(layer_s, extra_s, SplitTies::latest);
        const std::vector<int64_t> even = balanced_layer_split(layer_s, extra_s, SplitTies::most_even);
        ASSERT_EQ(latest, latest_of(false)) << stages << " stages, " << layers << " layers, trial " << trial;
        ASSERT_EQ(even, latest_of(true)) << stages << " stages, " << layers << " layers, trial " << trial;
        EXPECT_EQ(slowest_stage_s(latest, layer_s, extra_s), fastest);
        moved += latest != all.front() ? 1 : 0;
        rules_differ += latest != even ? 1 : 0;
      }
  EXPECT_GT(cases, 200);
  EXPECT_GT(moved, cases / 2);        // the cases are not all trivial
  EXPECT_GT(rules_differ, cases / 10);  // nor are the tie rules alike on them
}

TEST(LayerSplit, AHeavyLastStageGetsFewerLayers) {
  // Sixteen equal layers over 4 stages; the last also runs a head worth three layers: no stage over
  // 5 (the head and 2 layers), where the even split's last stage takes 7; the first keeps the fewest.
  EXPECT_EQ(balanced_layer_split(std::vector<double>(16, 1.0), {0, 0, 0, 3}, SplitTies::latest),
            (std::vector<int64_t>{4, 5, 5, 2}));
  // Dense first layers cheaper than the MoE layers after them: the first stage takes more of them.
  EXPECT_EQ(balanced_layer_split({1, 1, 1, 3, 3, 3}, {0, 0}, SplitTies::latest), (std::vector<int64_t>{4, 2}));
  // Where the last stage's head fixes the slowest stage (one layer and a head worth three: 4), the
  // rules part: latest leaves the first stage what is left over, most_even spreads the layers.
  EXPECT_EQ(balanced_layer_split(std::vector<double>(8, 1.0), {0, 0, 0, 3}, SplitTies::latest),
            (std::vector<int64_t>{1, 2, 4, 1}));
  EXPECT_EQ(balanced_layer_split(std::vector<double>(8, 1.0), {0, 0, 0, 3}, SplitTies::most_even),
            (std::vector<int64_t>{2, 2, 3, 1}));
}

TEST(LayerSplit, RefusesWhatCannotBeSplit) {
  EXPECT_HAS(error_of([] { balanced_layer_split({1, 1}, {0, 0, 0}, SplitTies::latest); }),
             "cannot split 2 layers over 3 pipeline stages (at least one layer each)");
  EXPECT_HAS(error_of([] { balanced_layer_split({1, -1}, {0}, SplitTies::latest); }), "a layer split priced with a time of -1");
  EXPECT_HAS(error_of([] { slowest_stage_s({1, 2}, {1, 1}, {0, 0}); }), "a split of 3 layers priced with 2 layer costs");
  EXPECT_HAS(error_of([] { slowest_stage_s({2, 0}, {1, 1}, {0, 0}); }), "a split with a stage of 0 layers");
}

}  // namespace
