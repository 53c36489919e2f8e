#pragma once
// StagePlan: the part of a model one pipeline rank holds. The decoder's layers are cut into
// pp x vpp virtual stages; rank r holds virtual stages r, pp + r, 2 pp + r, ... (Megatron-LM's
// interleaving), one "chunk" each, or, in a V (ZB-V, DualPipeV: 2 chunks), stages r and 2 pp - 1 - r.
// The embedding lives with virtual stage 0, the final norm and the head with the last one (in a V
// both on rank 0). A whole model is one chunk holding every layer, embedding and head.
#include <cstdint>
#include <string>
#include <vector>

#include "tessel/nn/model_config.h"

namespace tessel::nn {

struct LayerRange {
  int64_t begin = 0, end = 0;  // global layer indices [begin, end)
  int64_t size() const { return end - begin; }
};

// How a rank's chunks sit in the model (pipeline::Placement): interleaved, a V over 2 pp stages, or
// DualPipe's pp stages each held by two ranks (rank r: stages min(r, pp-1-r) and max(r, pp-1-r)).
enum class ChunkOrder { interleaved, v_shape, dual };

struct StagePlan {
  std::vector<LayerRange> chunks;  // in chunk order (virtual stage c * pp + rank, or the V's)
  bool has_embedding = true;       // chunk 0 is the first virtual stage
  bool has_head = true;            // the last chunk is the last virtual stage
  bool whole() const { return has_embedding && has_head && chunks.size() == 1; }
};

StagePlan whole_model_plan(const ModelConfig& cfg);

// Layers per virtual stage: `explicit_layers` (pp x vpp entries, in virtual-stage order, each >= 1,
// summing to model.num_layers) or, when empty, an even split (pp x vpp must divide num_layers).
// Throws naming the config keys when neither works.
std::vector<int64_t> layers_per_virtual_stage(const ModelConfig& cfg, int pp, int vpp,
                                              const std::vector<int64_t>& explicit_layers);

// The plan of pipeline rank `rank` of `pp`, with `vpp` chunks per rank (2 for a V and for dual, whose
// explicit_layers list pp stages).
StagePlan pipeline_plan(const ModelConfig& cfg, int pp, int vpp, int rank, const std::vector<int64_t>& explicit_layers,
                        ChunkOrder order = ChunkOrder::interleaved);

// "3,1,2" -> {3, 1, 2}; empty string -> {}. Throws naming `key` on anything else.
std::vector<int64_t> parse_layer_list(const std::string& text, const std::string& key);

}  // namespace tessel::nn
