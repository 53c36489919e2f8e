#pragma once
// Layers over pipeline stages by cost: the split of consecutive layers over the stages whose
// slowest stage is fastest. In a 1F1B pipeline every micro-batch passes through every stage, so in
// the steady state the slowest stage sets the pace (the makespan is about (m - 1) x the slowest
// stage + the sum of all stages, and the sum does not depend on the split). What Megatron-LM leaves
// to --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers, chosen here from
// measured costs: each layer's own (a DeepSeek-V3 dense layer is cheaper than a MoE one) and each
// stage's beyond its layers (the first stage's embedding; the last's output head, loss and
// multi-token-prediction modules).
#include <cstdint>
#include <vector>

namespace tessel::plan {

// Which of the splits as fast balanced_layer_split returns. The slowest stage is only the first
// order of a pipeline's step; which tie is faster depends on the model (plan estimate, B200 profile):
// DeepSeek-V3 on 1,024 ranks, pp 16, does best with its first stage light (3,4,...,4,2: latest),
// Llama-3 70B on 256 ranks, pp 8, with the layers spread (9,11,11,10,10,10,10,9 against 5,11,...,11,9).
// plan search tries both.
enum class SplitTies {
  latest,     // the most layers on the later stages: the last as many as it can take, then the one before
  most_even,  // the smallest sum of squared stage times; among those, latest
};

// layer_s[l]: layer l's time (any unit, >= 0); stage_extra_s[s]: stage s's time beyond its layers.
// Returns the layers of each stage (each >= 1, summing to layer_s.size()) that minimise the largest
// stage time stage_extra_s[s] + sum of its layers, the tie chosen by `ties`. Throws where there are
// fewer layers than stages, no stage, or a negative or non-finite time.
std::vector<int64_t> balanced_layer_split(const std::vector<double>& layer_s, const std::vector<double>& stage_extra_s,
                                          SplitTies ties);

// The largest stage time of `split` (layers per stage, in order) under those costs.
double slowest_stage_s(const std::vector<int64_t>& split, const std::vector<double>& layer_s,
                       const std::vector<double>& stage_extra_s);

}  // namespace tessel::plan
