#pragma once
// `tessel plan search`: the layouts of a model on N ranks, estimated (estimate.h) and ranked by
// tokens/s, in three phases:
//   1. every structure: tensor parallelism (sequence parallelism on, as Megatron runs it) and
//      context parallelism within a node, pipeline parallelism with 1 or 2 virtual chunks per rank
//      (1F1B / interleaved 1F1B; layers split as evenly as they go), expert parallelism (MoE
//      models) with the experts split over tensor parallelism or whole on it; data parallelism is
//      what remains. Each at micro-batch 1 with the distributed optimizer, and with full-layer
//      recompute only where it must, to fit;
//   2. the kRefinedStructures fastest of them with micro-batches 1, 2, 4, 8, the distributed
//      optimizer on and off, recompute off and on, each FP8 recipe asked for (fp8_recipes), and on
//      pipelined structures of one chunk per rank each pipeline schedule asked for (pipeline_schedules);
//   3. the kRefinedStructures fastest pipelined layouts of one chunk per rank with the layers split
//      unevenly: one layer fewer on the last stage (output head, loss, MTP), on the first (embedding),
//      or on both, the stages between taking them (as Megatron-LM's --decoder-first/last-pipeline-num-layers).
// Phase 2 is a local search, not every combination: a structure slow at micro-batch 1 is not
// refined. A layout the config refuses (a size that does not divide heads, layers or the
// sequence), that cannot exist on N ranks, or whose peak memory exceeds the limit is pruned,
// counted by its reason. Precision stays as configured, and the FP8 recipe unless recipes are asked
// for: they change the numerics, which is the user's choice to offer.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tessel/plan/estimate.h"

namespace tessel::plan {

inline constexpr int kRefinedStructures = 8;

struct SearchOptions {
  int world = 1;
  int64_t global_batch = 0;  // sequences per step; 0: the config's
  double memory_gib = 0;     // per device; 0: the profile's (0 there too: no limit)
  int top = 10;
  // FP8 recipes phase 2 tries besides the configured one (precision.fp8.recipe values: none,
  // delayed, current, block); empty: the configured recipe only.
  std::vector<std::string> fp8_recipes;
  // Pipeline schedules phase 2 tries besides the configured one (parallel.pipeline_schedule values:
  // zb-h1, zb-h2, zb-v, dualpipev, ...); empty: the configured schedule only.
  std::vector<std::string> pipeline_schedules;
  // Processes estimating layouts at once (forked: each has its own meta device). 1 in a process
  // that must not fork (an MPI rank: parallel.auto searches in one).
  int workers = 1;
  // Called after each layout, with the layouts done so far and the structures of phase 1 (optional).
  std::function<void(int done, int structures)> progress;
};

struct Candidate {
  std::vector<std::string> overrides;  // the --set list that selects it
  std::string layout;                  // "tp 2 sp, pp 2, vpp 1, cp 1, ep 1, dp 2, zero1, mbs 1, recompute off"
  Estimate estimate;  // step_s, tokens_per_s, mfu, peak_bytes (the stages only where this process estimated it)
};

struct SearchResult {
  std::vector<Candidate> ranked;               // fitting layouts, fastest first (all of them)
  std::map<std::string, int> pruned;           // reason -> count
  int enumerated = 0;                          // layouts estimated or pruned
  int structures = 0;                          // phase 1's
  double seconds = 0;
};

// A floor under a layout's memory per rank, known without running it: the routed experts' weights
// (compute dtype) and fp32 gradients on the pipeline stage with the most MoE layers, num_experts /
// ep experts per layer, each split over the tensor-parallel ranks where experts are. Everything else
// a rank holds comes on top, so a layout over the limit here is over it in the estimate too; the
// search prunes by it first, which spares it the dry runs of layouts with few expert-parallel ranks
// for a large MoE model. 0 for a dense model.
double routed_expert_floor_gib(const train::Config& cfg);

// load(overrides): the model's config with the layout's overrides applied (the caller's file and
// --set first), throwing tessel::Error for one it refuses.
SearchResult search_layouts(const std::function<train::Config(const std::vector<std::string>&)>& load,
                            const HardwareProfile& hw, const SearchOptions& o);

}  // namespace tessel::plan
