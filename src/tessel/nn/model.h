#pragma once
// Model: a decoder (embedding, layers, final norm, LM head + loss) assembled from a ModelConfig.
// The caller owns one Activations per micro-batch in flight (DESIGN.md section 2).
#include <functional>
#include <memory>
#include <vector>

#include "tessel/nn/embedding.h"
#include "tessel/nn/kv_cache.h"
#include "tessel/nn/lm_head.h"
#include "tessel/nn/norm.h"
#include "tessel/nn/transformer_layer.h"

namespace tessel::nn {

class Model {
 public:
  // tp (optional): tensor parallelism over this group (heads, MLP and vocabulary split; norms replicated).
  explicit Model(const ModelConfig& cfg, comm::Communicator* tp = nullptr);
  bool tensor_parallel() const { return tp_ != nullptr; }
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

  Tensor logits(const Tensor& tokens);                         // [B*T, V] f32, no state kept

  // Incremental decoding of one sequence: appends tokens [n] i64 at positions cache.length ... and
  // returns the logits of the last one [V] f32. The context is at most model.seq_length tokens.
  KVCache make_kv_cache() const;
  Tensor decode(const Tensor& tokens, KVCache& cache);
  double loss_sum(const Tensor& tokens, const Tensor& targets);  // evaluation, no gradients

 private:
  Tensor hidden(const Tensor& tokens, Activations& saved);  // final-norm output, compute dtype
  ModelConfig cfg_;
  comm::Communicator* tp_ = nullptr;
  std::unique_ptr<ParamStore> ps_;
  std::shared_ptr<const kernels::RopeTable> rope_;
  std::unique_ptr<Embedding> embed_;
  std::vector<std::unique_ptr<TransformerLayer>> layers_;
  std::unique_ptr<Norm> final_norm_;
  std::unique_ptr<LmHead> head_;
  int64_t batch_ = 0;
  std::vector<int64_t> layer_begin_;  // flat offset of each layer's first parameter
  int64_t norm_begin_ = 0, head_begin_ = 0;
};

}  // namespace tessel::nn
