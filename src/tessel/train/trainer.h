#pragma once
// Trainer: one optimizer step = gradient accumulation over the global batch's micro-batches, global
// grad-norm clipping, AdamW at the scheduled learning rate.
#include <memory>
#include <vector>

#include "tessel/ckpt/checkpoint.h"
#include "tessel/comm/communicator.h"
#include "tessel/comm/parallel_state.h"
#include "tessel/data/synthetic.h"
#include "tessel/nn/model.h"
#include "tessel/optim/adamw.h"
#include "tessel/optim/grad_reducer.h"
#include "tessel/optim/lr_schedule.h"
#include "tessel/optim/param_gather.h"
#include "tessel/pipeline/schedule.h"
#include "tessel/pipeline/trace.h"
#include "tessel/train/config.h"

namespace tessel::train {

// Exit status of `tessel train` stopped by SIGINT / SIGTERM after saving its checkpoint: EX_TEMPFAIL
// of sysexits.h ("try again later"), so a scheduler requeues it; a finished run exits 0. (Not 114:
// CLI11 reserves 100-127 for its own usage errors.)
inline constexpr int kExitCodeStopped = 75;

struct StepResult {
  double loss = 0;       // mean over the global batch's tokens
  double grad_norm = 0;  // before clipping
  double lr = 0;
  double moe_aux_loss = 0;                  // the MoE auxiliary losses' value in the objective
  double mtp_loss = 0;                      // multi-token prediction: mean cross-entropy over modules and tokens
  std::vector<double> expert_load_max_mean; // per layer: max / mean tokens per expert (0: dense)
};

// A sharded optimizer's state gathered for a checkpoint (host memory, freed with it); view points
// into it, or at the optimizer's own buffers when it owns everything.
struct GatheredOptimizerState {
  std::vector<float> exp_avg, exp_avg_sq, masters;
  ckpt::FullOptimizerState view{};
  GatheredOptimizerState() = default;
  GatheredOptimizerState(GatheredOptimizerState&&) = default;  // the vectors keep their buffers: view stays valid
  GatheredOptimizerState(const GatheredOptimizerState&) = delete;  // a copy's view would point into this one
  GatheredOptimizerState& operator=(const GatheredOptimizerState&) = delete;
};

// Everything a step changes on this rank, copied (resilience.snapshot_interval): the fp32 masters it
// holds, the compute copy and packed fp32 copy, its Adam moments and step count, and the model's other
// training state (FP8 scaling, MoE expert biases). The data position is the caller's.
struct TrainerSnapshot {
  Tensor masters, compute_copy, f32_copy, exp_avg, exp_avg_sq;
  int64_t optimizer_steps = 0;
  std::vector<std::pair<std::string, Tensor>> state;
  int64_t bytes() const;
};

class Trainer {
 public:
  // groups (null: one process): the model is split over tensor- and pipeline-parallel groups as the
  // config says; each data-parallel rank passes its own micro-batches, gradients are summed across
  // data-parallel ranks in buckets overlapping backward, so every replica takes the step a single
  // process would take on the whole global batch.
  explicit Trainer(const Config& cfg, comm::ParallelState* groups = nullptr);
  nn::Model& model() { return *model_; }
  optim::AdamW& optimizer() { return *opt_; }
  // With parallel.use_distributed_optimizer (ZeRO-1) each rank keeps Adam state for a 1/dp shard:
  // gradients are reduce-scattered, the shard updated, and parameters all-gathered.
  // micro_batches.size() x dp must be the configured accumulation count.
  StepResult step(const std::vector<data::Batch>& micro_batches, int64_t iter);
  // The optimizer state laid out over all parameters (collective over the distributed optimizer's
  // groups, dp and under expert parallelism the experts' group, which gather every rank's shard
  // into host memory the result owns).
  GatheredOptimizerState full_optimizer_state();
  // Whether the data-parallel gradients are reduced in buckets during backward (under expert
  // parallelism unit by unit, each over its group: grad_units): plain data parallelism, and the
  // distributed optimizer with parallel.overlap_grad_reduce unless an embedding tied across pipeline
  // stages asks for a reduction after backward. The wait for them, or for the reduce-scatter after
  // backward, is the profiler's "dp_grad_wait".
  bool buckets_reduce_grads() const;
  // Why parallel.overlap_grad_reduce=true cannot apply to this rank's layout ("" when it applies or
  // is off): an embedding tied across pipeline stages.
  std::string overlap_grad_reduce_ignored() const;
  // parallel.use_distributed_optimizer over a group of more than one rank (decided alike on every
  // rank, whatever each one's shard holds).
  bool distributed_optimizer() const { return shard_ != nullptr; }
  // With parallel.overlap_param_gather the all-gather of the updated parameters runs during the
  // next forward; this waits for all of it (before reading the parameters outside a forward).
  void wait_for_parameters();
  // Evaluation loss summed over a batch's tokens, the same on every rank (collective over the
  // pipeline group when the model is split into stages).
  double eval_loss_sum(const data::Batch& batch);
  // The last step's pipeline timeline as a Chrome trace (log.pipeline_trace), on pipeline rank 0; ""
  // elsewhere and without a pipeline. Collective over the pipeline group.
  std::string pipeline_trace_json();
  // A copy of this rank's training state, and its restoration (bit-exact: the next step computes what
  // it would have computed right after the snapshot). Waits for parameters in flight first.
  TrainerSnapshot snapshot();
  void restore(const TrainerSnapshot& s);
  // Fault injection (resilience/faults.h, `nan`): the next step writes a NaN into this rank's
  // gradients after they are reduced, before the norm.
  void poison_next_step_gradients() { poison_gradients_ = true; }
  // Multiplies every learning rate from now on (a rewind's resilience.rewind_lr_scale; a resumed run
  // applies the factor its checkpoint saved).
  void scale_learning_rate(double factor) { lr_scale_ *= factor; }
  double learning_rate_scale() const { return lr_scale_; }
  // The model's other training state for checkpoints: none on a DualPipe mirror (its pair saves it).
  std::vector<std::pair<std::string, Tensor>> checkpoint_state_tensors() const;

 private:
  int64_t data_parallel_size() const;                 // replicas taking different micro-batches
  data::Batch local_part(const data::Batch& b) const;  // this rank's context-parallel chunks (or b)
  // The units the gradient buckets are reduced in (GradReducer::Unit): the shard's under the
  // distributed optimizer, else runs of routed experts (over ep_dp_) and of the rest (over dp_).
  std::vector<optim::GradReducer::Unit> grad_units() const;
  // The group sharding unit u of the store's FlatShard (null: this rank holds all of it).
  comm::Communicator* unit_group(const nn::FlatShard::Unit& u) const;
  template <class Fn>
  void for_each_owned_flat_range(Fn fn) const;  // fn(flat_begin, flat_end) for what this rank owns
  // Reduce-scatters the gradients unit by unit: this rank's blocks receive the sums.
  void reduce_scatter_grads();
  // All-gathers unit u of `flat` (the compute copy, or the fp32 parameters) from its owners, in place.
  void gather_unit(const nn::FlatShard::Unit& u, const Tensor& flat);
  // Sums the tied embedding's gradient of the first and last pipeline stages (embedding group).
  void reduce_tied_embedding();
  Config cfg_;
  comm::Communicator* dp_ = nullptr;   // gradient reduction (and optimizer sharding) group: dp, or dp x cp
  comm::Communicator* cp_ = nullptr;   // context parallelism
  comm::Communicator* pp_ = nullptr;   // pipeline stages (null: the whole model here)
  comm::Communicator* tp_ = nullptr;
  comm::Communicator* embedding_ = nullptr;
  comm::Communicator* ep_ = nullptr;     // expert parallelism
  comm::Communicator* ep_dp_ = nullptr;  // ranks holding the same experts
  // DualPipe: the two pipeline ranks holding the same two stages (r and P-1-r); their gradients,
  // expert loads and FP8 amaxes are combined; the second (a mirror) neither saves nor counts them.
  std::unique_ptr<comm::Communicator> mirror_pair_;
  bool mirror_ = false;
  // The distributed optimizer's groups (null: not sharded): the replicated parameters' (the data-
  // parallel group) and, under expert parallelism, the routed experts' (the ranks holding the same
  // experts; null also when this rank alone holds its experts).
  comm::Communicator* shard_ = nullptr;
  comm::Communicator* expert_shard_ = nullptr;
  pipeline::Schedule schedule_ops_;
  pipeline::RankTrace last_trace_;  // the last step's spans on this rank (log.pipeline_trace)
  std::unique_ptr<nn::Model> model_;
  std::unique_ptr<optim::AdamW> opt_;
  // The overlapped parameter all-gather (null: gathered after the step); declared after the model,
  // so it is destroyed (waiting for what is in flight) before the buffers it writes.
  std::unique_ptr<optim::ParamGather> param_gather_;
  optim::LrSchedule schedule_;
  double lr_scale_ = 1.0;
  bool poison_gradients_ = false;
};

}  // namespace tessel::train
