#pragma once
// Model: a decoder (embedding, layers, final norm, LM head + loss) assembled from a ModelConfig, or
// the part of it one pipeline rank holds (StagePlan: chunks of layers, embedding on the first virtual
// stage, final norm and head on the last). The caller owns one Activations per micro-batch and chunk
// in flight (DESIGN.md section 2).
#include <functional>
#include <memory>
#include <vector>

#include "tessel/core/deep_const.h"
#include "tessel/nn/embedding.h"
#include "tessel/nn/fp8.h"
#include "tessel/nn/kv_cache.h"
#include "tessel/nn/lm_head.h"
#include "tessel/nn/mtp.h"
#include "tessel/nn/norm.h"
#include "tessel/nn/stage_plan.h"
#include "tessel/nn/transformer_layer.h"

namespace tessel::nn {

class Model {
 public:
  // tp (optional): tensor parallelism over this group (heads, MLP and vocabulary split; norms replicated).
  // plan (optional): the pipeline part to hold; default: the whole model. With tied embeddings, a
  // last stage without the embedding holds its own copy of the embedding weight (same values; a
  // ParamSpec.tied_copy whose gradient the trainer adds to the first stage's over the embedding group).
  // cp (optional): context parallelism; token batches are this rank's chunks ([B, T/cp], see
  // context_parallel.h: cp_local_slice) and attention runs around the ring.
  // ep (optional): expert parallelism; each rank holds its share of every MoE layer's experts.
  // master_shard, expert_shard: this rank's place in the distributed optimizer's groups, of the
  // replicated parameters and of the routed experts (params.h, flat_shard.h).
  explicit Model(const ModelConfig& cfg, comm::Communicator* tp = nullptr, const StagePlan& plan = {},
                 comm::Communicator* cp = nullptr, comm::Communicator* ep = nullptr, MasterShard master_shard = {},
                 MasterShard expert_shard = {});
  bool tensor_parallel() const { return tp_ != nullptr; }
  const StagePlan& plan() const { return plan_; }
  int num_chunks() const { return int(plan_.chunks.size()); }
  bool first_chunk_is_first_stage(int chunk) const { return chunk == 0 && plan_.has_embedding; }
  bool chunk_is_last_stage(int chunk) const { return chunk + 1 == num_chunks() && plan_.has_head; }
  const ModelConfig& config() const { return cfg_; }
  ParamStore& params() { return *ps_; }
  const ParamStore& params() const { return *ps_; }

  // One micro-batch: tokens, targets [B, T] i64. Gradients of (summed loss * grad_scale) are
  // accumulated into the fp32 grads. Returns the summed (unscaled) loss over the B*T tokens.
  // ready(begin, end), when given, is called during backward as soon as the gradients of the flat
  // range [begin, end) are complete for this micro-batch (last layer first, embedding last).
  using GradsReady = std::function<void(int64_t begin, int64_t end)>;
  double forward_backward(const Tensor& tokens, const Tensor& targets, float grad_scale,
                          const GradsReady& ready = nullptr);

  // The same split into its parts, for schedules that interleave micro-batches.
  double forward(const Tensor& tokens, const Tensor& targets, float grad_scale, Activations& saved);
  void backward(Activations& saved, const GradsReady& ready = nullptr);

  // Pipeline pieces, one micro-batch through one chunk:
  //   forward_chunk: the first virtual stage embeds `tokens` [B, T] i64; other chunks take the previous
  //     stage's output `input` [B*T, d] f32. The last virtual stage adds the loss against `targets`
  //     (summed, unscaled) to *loss and returns an empty tensor; others return their output [B*T, d] f32.
  //     grad_scale 0 is an evaluation forward: it changes no training state (FP8 amax histories, MoE
  //     statistics), so a run trains alike with and without evaluation.
  //   backward_chunk ("B"): dout is the gradient of the chunk's output (ignored on the last virtual
  //     stage); returns the gradient of its input (empty on the first virtual stage). With weights =
  //     true the weight gradients follow layer by layer (and ready() reports them), else they wait for
  //   backward_weight_chunk ("W").
  Tensor forward_chunk(int chunk, const Tensor& input, const Tensor& tokens, const Tensor& targets, float grad_scale,
                       Activations& saved, double* loss);

  // The flat parameter ranges in the order the forward reads them, tiling [0, params().numel()):
  // everything before the first layer (the embedding), each layer, everything after (final norm,
  // head, MTP modules). Empty ranges are left out.
  std::vector<std::pair<int64_t, int64_t>> forward_order_ranges() const;
  // Called with each of those ranges just before the forward reads it (the distributed optimizer's
  // overlapped parameter all-gather waits there); null: the parameters are always in place.
  using ParamsNeeded = std::function<void(int64_t begin, int64_t end)>;
  void set_params_needed(ParamsNeeded f) { params_needed_ = std::move(f); }
  Tensor backward_chunk(int chunk, const Tensor& dout, Activations& saved, bool weights,
                        const GradsReady& ready = nullptr);
  void backward_weight_chunk(int chunk, Activations& saved, const GradsReady& ready = nullptr);

  // After backward, before the optimizer: sums over tensor-parallel ranks the gradients that each
  // rank holds only part of (parameters replicated over the group under sequence parallelism, which
  // saw only this rank's rows; key/value heads replicated over several ranks). Collective over tp.
  void reduce_tensor_parallel_grads();

  // The FP8 quantisation state of the layers' Linears (null without an FP8 recipe).
  Fp8State* fp8_state() { return fp8_.get(); }

  // Multi-token prediction: this rank's summed cross-entropy of every module and the number of
  // predicted tokens since the last call (then reset).
  std::pair<double, int64_t> take_mtp_loss();

  // Mixture of Experts, after every micro-batch of a step: each MoE layer's tokens per expert summed
  // over `groups`, expert biases moved, counters reset. Returns max / mean tokens per expert for
  // every layer of the model, the multi-token-prediction modules' layers after the main ones
  // (index num_layers + k, as their parameter names); 0 for dense layers and other stages' layers.
  std::vector<double> moe_end_step(const std::vector<comm::Communicator*>& groups);
  double moe_take_aux_loss();  // this rank's auxiliary losses of the step (already loss-scaled)

  // Training state beside parameters and moments, for checkpoints: FP8 scaling histories and MoE
  // expert biases, by name. load_state_tensors restores what it finds; returns the names missing.
  std::vector<std::pair<std::string, Tensor>> state_tensors() const;
  std::vector<std::string> load_state_tensors(const std::vector<std::pair<std::string, Tensor>>& tensors);

  // Rows of the activations passed between stages for a micro-batch of `tokens` tokens: all of them,
  // or this rank's share under sequence parallelism.
  int64_t activation_rows(int64_t tokens) const;

  Tensor logits(const Tensor& tokens);                         // [B*T, V] f32, no state kept

  // Incremental decoding of one sequence: appends tokens [n] i64 at positions cache.length ... and
  // returns the logits of the last one [V] f32. The context is at most model.seq_length tokens.
  KVCache make_kv_cache() const;
  Tensor decode(const Tensor& tokens, KVCache& cache);
  double loss_sum(const Tensor& tokens, const Tensor& targets);  // evaluation, no gradients

 private:
  Tensor hidden(const Tensor& tokens, Activations& saved);  // final-norm output (evaluation)
  void require_whole(const char* what) const;
  // Multi-token prediction after the main model (h: the last layer's output [N, d] f32): adds each
  // module's loss; backward returns the gradient it sends back into h.
  Embedding& mtp_embedding() { return embed_ ? *embed_ : *embed_copy_; }
  int64_t sequence_split() const;          // ranks the activation rows are split over (1: none)
  int64_t batch_of(int64_t rows) const;    // sequences in a micro-batch whose activations have `rows` rows here
  // Layer l's (an index into layers_) weight gradients, then its range reported as ready.
  void layer_weights(size_t l, Activations& saved, const GradsReady& ready);
  void report(const GradsReady& ready, int64_t begin, int64_t end) const;
  void need(int64_t begin, int64_t end) const;  // params_needed_, when set, for a non-empty range
  int64_t layer_end(size_t l) const { return l + 1 < layers_.size() ? layer_begin_[l + 1] : layers_end_; }
  ParamsNeeded params_needed_;
  ModelConfig cfg_;
  StagePlan plan_;
  comm::Communicator* tp_ = nullptr;
  comm::Communicator* cp_ = nullptr;
  std::unique_ptr<comm::Communicator> kv_replicas_;  // tp ranks holding the same key/value heads
  int64_t local_seq_ = 0;  // rows of one sequence on this rank (seq_length / cp)
  DeepConstOwner<ParamStore> ps_;
  DeepConstOwner<Fp8State> fp8_;
  std::shared_ptr<const kernels::RopeTable> rope_;
  DeepConstOwner<Embedding> embed_;
  DeepConstOwner<Embedding> embed_copy_;  // MTP on a last stage without the embedding
  std::vector<DeepConstOwner<TransformerLayer>> layers_;  // every layer held, chunk after chunk
  std::vector<size_t> chunk_first_;                        // index into layers_ of each chunk's first layer
  DeepConstOwner<Norm> final_norm_;
  DeepConstOwner<LmHead> head_;
  // fn(index, moe) for every MoE layer this rank holds, the MTP modules' (index num_layers + k) included;
  // moe is const on a const model.
  template <class Fn>
  void for_each_moe(Fn&& fn);
  template <class Fn>
  void for_each_moe(Fn&& fn) const;
  template <class Self, class Fn>
  static void for_each_moe_of(Self& self, Fn&& fn);
  DeepConstOwner<MultiTokenPrediction> mtp_;  // on the last pipeline stage when model.mtp_num_layers > 0
  int64_t mtp_begin_ = 0, mtp_end_ = 0;
  std::vector<int64_t> layer_begin_;  // flat offset of each held layer's first parameter
  int64_t layers_end_ = 0;             // first offset after the layers (the final norm, if held)
  int64_t head_begin_ = 0, head_end_ = 0;
};

}  // namespace tessel::nn
