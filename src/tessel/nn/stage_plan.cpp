#include "tessel/nn/stage_plan.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "tessel/core/check.h"

namespace tessel::nn {

StagePlan whole_model_plan(const ModelConfig& cfg) { return {{{0, cfg.num_layers}}, true, true}; }

std::vector<int64_t> layers_per_virtual_stage(const ModelConfig& cfg, int pp, int vpp,
                                              const std::vector<int64_t>& explicit_layers) {
  const int64_t stages = int64_t(pp) * vpp;
  TESSEL_CHECK(pp >= 1 && vpp >= 1, "pipeline sizes must be >= 1 (pipeline_model_parallel_size {}, "
               "virtual_pipeline_model_parallel_size {})", pp, vpp);
  if (explicit_layers.empty()) {
    TESSEL_CHECK(cfg.num_layers % stages == 0,
                 "model.num_layers {} does not split evenly over {} pipeline stages (pipeline_model_parallel_size {} "
                 "x virtual_pipeline_model_parallel_size {}); set parallel.pipeline_layers_per_stage to choose",
                 cfg.num_layers, stages, pp, vpp);
    return std::vector<int64_t>(static_cast<size_t>(stages), cfg.num_layers / stages);
  }
  TESSEL_CHECK(int64_t(explicit_layers.size()) == stages,
               "parallel.pipeline_layers_per_stage has {} entries, the pipeline has {} virtual stages "
               "(pipeline_model_parallel_size {} x virtual_pipeline_model_parallel_size {})",
               explicit_layers.size(), stages, pp, vpp);
  for (int64_t n : explicit_layers)
    TESSEL_CHECK(n >= 1, "parallel.pipeline_layers_per_stage: every stage needs at least 1 layer, got {}", n);
  const int64_t sum = std::accumulate(explicit_layers.begin(), explicit_layers.end(), int64_t(0));
  TESSEL_CHECK(sum == cfg.num_layers, "parallel.pipeline_layers_per_stage sums to {} layers, model.num_layers is {}",
               sum, cfg.num_layers);
  return explicit_layers;
}

StagePlan pipeline_plan(const ModelConfig& cfg, int pp, int vpp, int rank,
                        const std::vector<int64_t>& explicit_layers, ChunkOrder order) {
  const bool v_shape = order == ChunkOrder::v_shape, dual = order == ChunkOrder::dual;
  TESSEL_CHECK(!(v_shape || dual) || vpp == 2, "a V or a DualPipe pipeline has 2 chunks per rank, not {}", vpp);
  TESSEL_CHECK(!dual || pp % 2 == 0, "a DualPipe pipeline needs an even pipeline size, got {}", pp);
  const auto per = layers_per_virtual_stage(cfg, pp, dual ? 1 : vpp, explicit_layers);
  TESSEL_CHECK(rank >= 0 && rank < pp, "pipeline rank {} outside [0, {})", rank, pp);
  const int low = std::min(rank, pp - 1 - rank), high = std::max(rank, pp - 1 - rank);
  StagePlan plan;
  plan.has_embedding = dual ? low == 0 : rank == 0;
  plan.has_head = dual ? high == pp - 1 : v_shape ? rank == 0 : rank == pp - 1;
  for (int c = 0; c < vpp; ++c) {
    const size_t v = dual      ? size_t(c == 0 ? low : high)
                     : v_shape ? size_t(c == 0 ? rank : 2 * pp - 1 - rank)
                               : size_t(c) * size_t(pp) + size_t(rank);
    const int64_t begin = std::accumulate(per.begin(), per.begin() + std::ptrdiff_t(v), int64_t(0));
    plan.chunks.push_back({begin, begin + per[v]});
  }
  return plan;
}

std::vector<int64_t> parse_layer_list(const std::string& text, const std::string& key) {
  std::vector<int64_t> out;
  if (text.empty()) return out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    TESSEL_CHECK(used > 0 && item.find_first_not_of(" \t", used) == std::string::npos,
                 "{}: '{}' is not a comma-separated list of layer counts (e.g. \"3,2,2,1\")", key, text);
    out.push_back(v);
  }
  return out;
}

}  // namespace tessel::nn
