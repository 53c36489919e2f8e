#pragma once
// The model a plan is made for: a tessel YAML config, or a SimuMax model JSON
// (../shared/simumax/models/) read with SimuMax's common strategy, which is Megatron-LM's: bf16 with
// the embedding looked up in bf16 (precision.fp32_embedding off), micro-batch 1, sequence parallelism
// wherever tensor parallelism is on, the distributed optimizer, experts whole on each rank (expert
// tensor parallelism 1), sequence length 4096, the vocabulary padded to a multiple of 128 x tp;
// --set overrides each like any key.
#include <string>
#include <vector>

#include "tessel/train/config.h"

namespace tessel::plan {

// YAML text equivalent to a SimuMax model JSON file. Throws naming the file and the field for a
// missing key, a wrong type, or an attention / model type tessel does not build.
// The vocabulary is padded for `tensor_parallel` ranks, as Megatron-LM pads it.
std::string simumax_model_yaml(const std::string& path, int64_t tensor_parallel = 1);

// A tessel YAML, or (a .json path) a SimuMax model, with overrides applied and validated.
train::Config load_plan_config(const std::string& path, const std::vector<std::string>& overrides);

}  // namespace tessel::plan
