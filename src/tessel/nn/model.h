#pragma once
// Model: a decoder (embedding, layers, final norm, LM head + loss) assembled from a ModelConfig.
// The caller owns one Activations per micro-batch in flight (DESIGN.md section 2).
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
  explicit Model(const ModelConfig& cfg);
  const ModelConfig& config() const { return cfg_; }
  ParamStore& params() { return *ps_; }
  const ParamStore& params() const { return *ps_; }

  // One micro-batch: tokens, targets [B, T] i64. Gradients of (summed loss * grad_scale) are
  // accumulated into the fp32 grads. Returns the summed (unscaled) loss over the B*T tokens.
  double forward_backward(const Tensor& tokens, const Tensor& targets, float grad_scale);

  // The same split into its parts, for schedules that interleave micro-batches.
  double forward(const Tensor& tokens, const Tensor& targets, float grad_scale, Activations& saved);
  void backward(Activations& saved);

  Tensor logits(const Tensor& tokens);                         // [B*T, V] f32, no state kept

  // Incremental decoding of one sequence: appends tokens [n] i64 at positions cache.length ... and
  // returns the logits of the last one [V] f32. The context is at most model.seq_length tokens.
  KVCache make_kv_cache() const;
  Tensor decode(const Tensor& tokens, KVCache& cache);
  double loss_sum(const Tensor& tokens, const Tensor& targets);  // evaluation, no gradients

 private:
  Tensor hidden(const Tensor& tokens, Activations& saved);  // final-norm output, compute dtype
  ModelConfig cfg_;
  std::unique_ptr<ParamStore> ps_;
  std::shared_ptr<const kernels::RopeTable> rope_;
  std::unique_ptr<Embedding> embed_;
  std::vector<std::unique_ptr<TransformerLayer>> layers_;
  std::unique_ptr<Norm> final_norm_;
  std::unique_ptr<LmHead> head_;
  int64_t batch_ = 0;
};

}  // namespace tessel::nn
