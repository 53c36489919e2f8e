#pragma once
// The run configuration: YAML with sections model, train, parallel, precision, data, checkpoint,
// resilience, log (key names: DESIGN.md section 5, Megatron-LM's where one exists).
// `--set section.key=value` overrides any key. Unknown keys and impossible values are errors that
// name the key and what is allowed; the resolved config is written next to a run's metrics.
#include <cstdint>
#include <string>
#include <vector>

#include "tessel/comm/parallel_state.h"
#include "tessel/nn/model_config.h"
#include "tessel/nn/stage_plan.h"

namespace tessel::train {

struct TrainConfig {
  int64_t train_iters = 100;
  int64_t micro_batch_size = 1;
  int64_t global_batch_size = 1;
  double lr = 3e-4;
  double min_lr = 0.0;
  int64_t lr_warmup_iters = 0;
  std::string lr_decay_style = "cosine";
  int64_t lr_wsd_decay_iters = 0;
  double weight_decay = 0.1;
  double clip_grad = 1.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.95;
  double adam_eps = 1e-8;
  int64_t seed = 1234;
  int64_t eval_interval = 0;
  int64_t eval_iters = 0;
  int64_t exit_interval = 0;  // stop (with a checkpoint) once the step count is a multiple of this; 0: never
  // Iterations whose data is skipped untrained (Megatron-LM's --skip-train-iteration-range): "A-B"
  // or "A" items, 1-based and inclusive, separated by commas or spaces. A skipped iteration consumes
  // its global batch and advances the iteration count (and so the learning-rate schedule), and takes
  // no optimizer step: what a rewind does with the window it skips.
  std::string skip_train_iteration_range;
  // The ranges parsed (first, last), in the order given; throws naming the item when malformed.
  std::vector<std::pair<int64_t, int64_t>> skipped_iterations() const;
  bool skips_iteration(int64_t iteration) const;
};

struct ParallelConfig {
  int64_t tensor_model_parallel_size = 1;
  int64_t pipeline_model_parallel_size = 1;
  int64_t virtual_pipeline_model_parallel_size = 1;
  bool sequence_parallel = false;
  int64_t context_parallel_size = 1;
  int64_t expert_model_parallel_size = 1;
  // Routed and shared experts split over the tensor-parallel group (= tensor_model_parallel_size) or
  // replicated on it (1); 0: as Megatron-Core, the tensor-parallel size.
  int64_t expert_tensor_parallel_size = 0;
  bool use_distributed_optimizer = false;
  // 1f1b | interleaved | zb-h1 | zb-h2 | zb-v | dualpipe | dualpipev (pipeline/schedule.h; 1f1b with
  // vpp > 1 runs interleaved)
  std::string pipeline_schedule = "1f1b";
  std::string pipeline_layers_per_stage;   // "3,2,2,1": layers per virtual stage; empty: even split
  int64_t ddp_bucket_size = 4000000;  // elements per data-parallel gradient all-reduce bucket
  // The distributed optimizer reduces each gradient bucket during backward, to the ranks owning its
  // parts (plain data parallelism always all-reduces its buckets during backward); false: one
  // reduce-scatter after backward.
  bool overlap_grad_reduce = false;
  // The distributed optimizer's parameter all-gather runs layer by layer during the next forward,
  // each layer waiting for its own weights (optim/param_gather.h); false: one all-gather after the step.
  bool overlap_param_gather = false;
  // Pipeline receives are posted one operation early (before the compute operation that precedes
  // them), so a transfer is in flight during that computation: the next forward's activations, or an
  // F&B pair's incoming gradient during its forward (Megatron-LM's overlap_p2p_comm); false: each
  // receive is posted when the schedule reaches it.
  bool overlap_p2p_comm = false;
  // DualPipe's F&B pairs (pipeline_schedule dualpipe, dualpipev) run their forward and backward
  // interleaved, each MoE all-to-all (dispatch, combine) of one in flight while the other computes
  // (core/paired_tasks.h; Megatron-LM's overlap_moe_expert_parallel_comm); false: the pair's F,
  // then its B. Same losses either way.
  bool overlap_moe_expert_parallel_comm = false;
  // Choose the layout (every size above, sequence parallelism, the distributed optimizer, the
  // micro-batch size and recompute) with `tessel plan search` for the world the run is launched
  // with, ranked by predicted tokens/s on auto_hardware (a hardware profile; empty: this machine,
  // measured at start-up as `tessel plan calibrate` does).
  bool auto_layout = false;  // key: parallel.auto
  // Model chunks per pipeline rank: the virtual pipeline size, or 2 for the V-shaped schedules.
  int chunks_per_rank() const;
  std::string auto_hardware;
};

struct PrecisionConfig {
  std::string compute = "fp32";  // fp32 | bf16
  // The token embedding looked up in fp32 (PyTorch autocast's rule; with sharded masters a whole fp32
  // copy of the table is kept). false: from the compute copy, as Megatron-LM's bf16 model does.
  bool fp32_embedding = true;
  std::string fp8_recipe = "none";
  std::string fp8_format = "hybrid";
  int64_t fp8_amax_history_len = 1024;
  std::string fp8_amax_compute_algo = "max";
  int64_t fp8_margin = 0;
  bool fp8_power_of_2_scales = false;      // per-tensor recipes; block scaling always uses powers of two
  bool fp8_first_last_layers_bf16 = false; // keep num_layers_at_{start,end}_in_bf16 layers in bf16
  int64_t fp8_num_layers_at_start_in_bf16 = 1;
  int64_t fp8_num_layers_at_end_in_bf16 = 1;
  bool fp8_fused_casts = true;             // norms / activations write FP8 Linear inputs directly
  nn::Fp8Recipe fp8_recipe_parsed() const;  // throws naming precision.fp8.<key>
};

struct DataConfig {
  std::string path = "synthetic";  // "synthetic": generated sequences (no dataset needed)
  std::string tokenizer;
  std::string split = "969,30,1";
};

struct CheckpointConfig {
  std::string dir;
  int64_t interval = 0;
  int64_t keep = 3;
  // Every rank writes its own pieces (tessel-checkpoint-2, ckpt/distributed_checkpoint.h) instead of
  // rank 0 writing whole tensors gathered from all. Either format loads under any layout.
  bool distributed = false;
  // The save copies what it writes to host memory, and a background thread writes it while training
  // goes on (Megatron-LM's --async-save); a new save, the end of the run and a stop wait for it.
  bool async_save = false;
};

// Detectors, rewind and the collective watchdog (docs/resilience.md).
struct ResilienceConfig {
  // Detectors, checked after every step on every rank and agreed by all (any rank's trigger counts).
  bool detect_nonfinite = true;       // a NaN or infinite loss or gradient norm
  double loss_spike_zscore = 0;       // loss more than this many standard deviations above the window's mean; 0: off
  double grad_norm_spike_zscore = 0;  // the same for the gradient norm (before clipping); 0: off
  int64_t spike_window = 20;          // accepted steps the spike detectors' mean and deviation are taken over
  // An in-memory copy of the whole training state every N steps (parameters, optimizer, FP8 and MoE
  // state, data position); 0: a rewind restores the newest checkpoint in checkpoint.dir instead.
  int64_t snapshot_interval = 0;
  double rewind_lr_scale = 1.0;  // each rewind multiplies the learning rate by this for the rest of the run (checkpointed)
  int64_t max_rewinds = 3;       // more rewinds than this within rewind_window steps: stop (exit 65)
  int64_t rewind_window = 100;
  // A collective or transfer that waits longer than this is an error on the ranks waiting for it,
  // naming the operation, the group and the ranks that did not arrive; 0: wait forever.
  double collective_timeout_s = 600;
  // Faults to inject, for tests and drills: "KIND@STEP[:RANK]" separated by commas (also --inject).
  std::string inject;
};

struct LogConfig {
  std::string dir = "runs/latest";
  int64_t interval = 1;
  // Under pipeline parallelism: each step's timeline (every rank's F, B, W, sends and receives) as a
  // Chrome trace, log.dir/pipeline_trace.json, rewritten after every step (the last one stays).
  bool pipeline_trace = false;
};

struct Config {
  nn::ModelConfig model;
  TrainConfig train;
  ParallelConfig parallel;
  PrecisionConfig precision;
  DataConfig data;
  CheckpointConfig checkpoint;
  ResilienceConfig resilience;
  LogConfig log;

  // Loads a YAML file (path may be empty: built-in defaults), applies "section.key=value" overrides,
  // validates. Throws tessel::Error naming the file, key and allowed values.
  static Config load(const std::string& path, const std::vector<std::string>& overrides);
  static Config from_yaml_text(const std::string& yaml, const std::vector<std::string>& overrides,
                               const std::string& origin = "<text>");
  std::string to_yaml() const;  // the resolved config, every key
  void validate() const;
  // Settings that are allowed but probably not meant (printed by train and bench), e.g. a warm-up
  // longer than the run.
  std::vector<std::string> warnings() const;
  // parallel.overlap_moe_expert_parallel_comm where it has an effect: DualPipe's F&B pairs with
  // expert parallelism over MoE layers (elsewhere a pair has no all-to-all to overlap).
  bool fuses_moe_pairs() const;
  int64_t grad_accumulation_steps() const { return train.global_batch_size / train.micro_batch_size; }
  // The layout's group sizes (tensor, context, pipeline, expert) for ParallelState.
  comm::ParallelSizes parallel_sizes() const {
    return {int(parallel.tensor_model_parallel_size), int(parallel.context_parallel_size),
            int(parallel.pipeline_model_parallel_size), int(parallel.expert_model_parallel_size)};
  }
  // Throws, naming both sizes, when the global batch does not split over `data_parallel` ranks.
  void check_batch_splits(int64_t data_parallel) const;
  // The layers pipeline rank `pp_rank` holds under this config's pipeline size, schedule (its chunks
  // per rank and their order) and parallel.pipeline_layers_per_stage; the whole model without a pipeline.
  nn::StagePlan stage_plan(int pp_rank) const;
};

}  // namespace tessel::train
