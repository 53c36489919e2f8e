#pragma once
// `tessel plan estimate`: the step time and memory of one layout on one hardware profile, without
// running it. The real training step runs on the meta device once per pipeline stage (train/
// dry_run.h), recording every kernel call and collective with the phase of the step it was made in;
// cost_model.h prices each one; they are then assembled as tessel runs them:
//   - each pipeline pass F(mb, chunk), B, W costs its kernels plus the blocking collectives made in
//     it (tensor-, context-, expert-parallel: on the critical path); collectives launched to
//     overlap (the context-parallel ring) cost only what their pass's compute does not cover, on a
//     profile whose collectives progress during compute;
//   - the pipeline's makespan comes from tessel's schedule simulator (pipeline/simulate.h) fed with
//     each virtual stage's F, B and W times and the activation transfer time, for the schedule the
//     trainer runs; without pipeline parallelism the passes run back to back;
//   - after it, per stage: the exposed data-parallel gradient reduction (the buckets launched
//     during backward hide behind the last micro-batch's backward where the profile progresses
//     them), the optimizer step and the parameter all-gather (hidden behind the next forward with
//     parallel.overlap_param_gather, as far as it covers it).
// Memory: the meta run's exact per-rank peak by category (on a cpu profile the cpu pool's blocks;
// on a gpu profile the bytes requested).
#include <map>
#include <string>
#include <vector>

#include "tessel/core/memory.h"
#include "tessel/plan/hardware_profile.h"
#include "tessel/train/config.h"

namespace tessel::plan {

struct StageEstimate {
  std::string role;  // "pipeline stage 0 of 2"
  std::vector<int> ranks;
  // One micro-batch through all of this rank's chunks.
  double forward_s = 0, backward_s = 0, weight_s = 0;
  // Over the step: kernels of the passes, and the collectives on their critical path by group.
  double compute_s = 0;
  std::map<std::string, double> exposed_comm_s;  // group -> seconds ("tp", "cp", "ep", "dp", "pp", ...)
  // The expert-parallel all-to-alls that F&B pairs run fused hid behind the other pass's compute
  // (parallel.overlap_moe_expert_parallel_comm, on a profile whose collectives progress on their own):
  // taken out of exposed_comm_s["ep"] and of the passes.
  double hidden_all_to_all_s = 0;
  double pipeline_end_s = 0;    // when this rank's last pass ends
  double bubble_s = 0;          // idle time inside the pipeline (pipeline_end - its own passes)
  double optimizer_s = 0;       // kernels of the optimizer step (the grad norm's all-reduce is in exposed_comm_s)
  double step_s = 0;
  int64_t peak_bytes = 0;
  MemoryStats::PerCategory peak_bytes_by_category{};
  std::string peak_at;
  // On a cpu profile, what tessel's pool holds at most over two steps: the blocks in use and the
  // free blocks it keeps (its slack), from a meta run of its own of every micro-batch and expert
  // (the meta device runs the same pool). A stage that shares another's measurement
  // (share_equal_stages) takes its reserve too, which, unlike its in-use peak, need not bound its
  // own. With the GEMM primitives below. 0 on other profiles, whose allocators are not tessel's.
  int64_t peak_reserved_bytes = 0;
  // On a cpu profile, the GEMM primitives oneDNN holds (kernels/gemm_primitive_census.h): one per
  // distinct problem of the step, outside tessel's allocator; included in peak_bytes and
  // peak_reserved_bytes (not in a category). 0 on other profiles.
  int64_t gemm_primitives = 0, gemm_primitive_bytes = 0;
  double flops = 0;             // this rank's kernels, per step
  // Per step: kernel seconds by op family (gemm by its compute kind and variant: "gemm.bf16 NT"),
  // and collective seconds by group and kind ("tp all_gather"), exposed or not.
  std::map<std::string, double> kernel_s_by_op;
  std::map<std::string, double> comm_s_by_kind;
  // The passes' time (per step: kernels and blocking collectives) split by what it was spent on:
  // each of this rank's transformer layers, in the order the model holds them (its chunks' layers
  // in turn; a context-parallel ring's exposed transfers go to the layers whose attention they
  // feed), and the rest (the embedding, the final norm, output head and loss, multi-token
  // prediction). plan search balances the layers of a
  // pipeline over its stages from these (plan/layer_split.h).
  std::vector<double> layer_s;
  double non_layer_s = 0;
};

struct Estimate {
  int world = 1;
  std::string layout;
  std::string hardware;
  std::vector<StageEstimate> stages;
  double step_s = 0;
  double tokens_per_s = 0;
  double mfu = 0;                 // model FLOPs (ModelConfig::train_flops_per_token) over world x gemm peak
  int64_t peak_bytes = 0;         // max over ranks
  int64_t peak_reserved_bytes = 0;  // max over ranks (cpu profiles)
  double seconds = 0;             // the estimate's own run time
};

struct EstimateOptions {
  // Run every micro-batch of the step on the meta device. By default a rank's micro-batches beyond
  // those that bring its pipeline to its steady state run once, as one middle micro-batch weighted
  // by how many it stands for: the same ops, so the same times and the same peak (exact; a test
  // compares both).
  bool every_micro_batch = false;
  // Run every one of a MoE block's local experts. By default, experts in a row that run the same
  // number of rows run as calls alike (nn/alike_calls.h): three of them, the others recorded and
  // accounted as one of those (exact too; the same test).
  bool every_expert = false;
  // Pipeline stages that run the same layers (and hold the same embedding / head) are measured
  // once, on the first of them: the others take its times, which are theirs, and its peak, which
  // bounds theirs (a later stage holds fewer micro-batches in flight). For searches: the step time
  // and the peak over ranks are exact, a later stage's own peak is not. 1F1B and interleaved only:
  // under the zero-bubble and V schedules every stage is measured.
  bool share_equal_stages = false;
};

// Throws, naming the setting, for a layout that cannot exist (train/dry_run.h) or a profile that
// lacks what the step needs (an op kind, a network level).
Estimate estimate_step(const train::Config& cfg, const HardwareProfile& hw, int world, const EstimateOptions& opt = {});

}  // namespace tessel::plan
