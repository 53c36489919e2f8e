#pragma once
// Self-attention block: fused QKV projection, RoPE (Llama), causal GQA attention, output projection.
// Rows are tokens of a [B, T] micro-batch flattened to N = B*T.
//   qkv [N, (H + 2G) * Dh] f32: q heads, then k heads, then v heads (the fused weight's row order)
//   out [N, H * Dh] in the compute dtype, lse [B, H, T]
#include <memory>
#include <string>

#include "tessel/core/deep_const.h"
#include "tessel/kernels/rope.h"
#include "tessel/nn/layer_blocks.h"
#include "tessel/nn/linear.h"
#include "tessel/nn/model_config.h"

namespace tessel::nn {

class SelfAttention final : public AttentionBlock {
 public:
  // tp (optional): heads split over the tensor-parallel group (query and key/value heads must both
  // divide); QKV is column-parallel, the output projection row-parallel.
  // cp (optional): context parallelism; rows are this rank's 2 load-balanced chunks of each sequence
  // (context_parallel.h), attention runs around the ring.
  SelfAttention(ParamStore& ps, const std::string& prefix, const ModelConfig& cfg, int64_t layer_count,
                std::shared_ptr<const kernels::RopeTable> rope, comm::Communicator* tp = nullptr,
                comm::Communicator* cp = nullptr);

  Tensor forward(const LinearInput& y, int64_t batch, Activations& saved) override;  // y [N, d] -> [N, d] f32
  const Linear* input_linear() const override { return &qkv_; }  // the Linear reading y
  Tensor backward_input(const Tensor& dout, Activations& saved) override;  // -> dy [N, d] f32
  void backward_weight(Activations& saved) override;

  // Inference: y [n, d] holds positions pos0 .. pos0 + n - 1 of one sequence; their keys and values
  // are appended to the layer's cache (k_cache, v_cache [capacity, G * Dh]) and each position
  // attends to the cache up to itself. Returns [n, d] f32. Nothing is saved for backward.
  Tensor forward_decode(const Tensor& y, int64_t pos0, Tensor& k_cache, Tensor& v_cache) override;
  int64_t kv_width() const override { return G_ * Dh_; }

 private:
  void apply_rope(const Tensor& qk, bool inverse) const;  // qk: the q and k heads' columns of qkv
  DeepConstPtr<ParamStore> ps_;  // const methods see a const store (core/deep_const.h)
  comm::Communicator* cp_;
  int64_t H_, G_, Dh_, T_;  // H_, G_: this rank's heads; T_: this rank's rows of a sequence
  std::shared_ptr<const kernels::RopeTable> rope_;  // null for GPT-2
  Linear qkv_, o_;
  std::string key_qkv_, key_out_, key_lse_;
};

}  // namespace tessel::nn
