#pragma once
// Multi-head latent attention (DeepSeek-V2/V3 report section 2.1.1), Hugging Face DeepSeek-V3 names:
//   query   c_q = RMSNorm(y @ q_a_proj^T) [N, q_lora_rank]; q = c_q @ q_b_proj^T [N, H, nope + rope]
//           (or q = y @ q_proj^T when q_lora_rank is 0)
//   key/val [c_kv | k_pe] = y @ kv_a_proj_with_mqa^T [N, kv_lora_rank + rope]; c_kv = RMSNorm(c_kv);
//           [k_nope | v] = c_kv @ kv_b_proj^T [N, H, nope + v]; k_pe is one RoPE key shared by all heads
//   scores  (q_nope . k_nope + rope(q_pe) . rope(k_pe)) / sqrt(nope + rope), causal
//   out     o_proj(attention over v) [N, d]
// The tiled attention kernel takes one head size: q and k are [N, H, nope + rope] and v is padded
// with zeros to it (the padded output columns are zero and dropped).
// Tensor parallelism splits the heads (q_b, kv_b column-parallel, o row-parallel); the latent
// projections and their norms are replicated, their inputs' gradients arrive whole through the
// column-parallel backward, and the shared k_pe's gradient is summed over the group.
// Sequence parallelism (cfg.sequence_parallel with tp): y is this rank's rows; the replicated latent
// projections and norms run on them (their gradients are summed over the group with the other
// replicated parameters'), q_b / kv_b all-gather the small latents, k_pe is all-gathered (its
// gradient reduce-scattered) and o reduce-scatters.
// Context parallelism (cp): rows are this rank's 2 load-balanced chunks of each sequence
// (context_parallel.h); RoPE uses their global positions and attention runs around the ring.
#include <memory>
#include <string>

#include "tessel/core/deep_const.h"
#include "tessel/kernels/attention.h"
#include "tessel/kernels/rope.h"
#include "tessel/nn/layer_blocks.h"
#include "tessel/nn/linear.h"
#include "tessel/nn/model_config.h"
#include "tessel/nn/norm.h"

namespace tessel::nn {

class MlaAttention final : public AttentionBlock {
 public:
  // rope: a table for qk_pos_emb_head_dim.
  MlaAttention(ParamStore& ps, const std::string& prefix, const ModelConfig& cfg, int64_t layer_count,
               std::shared_ptr<const kernels::RopeTable> rope, comm::Communicator* tp = nullptr,
               comm::Communicator* cp = nullptr);
  // y [N, d] -> [N, d] f32 (N: this rank's rows; batch: sequences of the micro-batch).
  Tensor forward(const Tensor& y, int64_t batch, Activations& saved);
  Tensor forward(const LinearInput& y, int64_t batch, Activations& saved) override;  // y unquantized
  Tensor backward_input(const Tensor& dout, Activations& saved) override;  // -> dy [N, d] f32
  void backward_weight(Activations& saved) override;
  // Generation with multi-latent attention is not supported yet: both refuse with that message.
  Tensor forward_decode(const Tensor& y, int64_t pos0, Tensor& k_cache, Tensor& v_cache) override;
  int64_t kv_width() const override;

 private:
  int64_t qk() const { return nope_ + rope_dim_; }
  // Rotates x [rows, rope] (rows strided: a column slice is fine) in place, row r at its sequence
  // position (under context parallelism: its global one).
  // heads rotary blocks head_stride columns apart (0: one block, all of x's columns).
  void apply_rope(const Tensor& x, bool inverse, int64_t heads = 1, int64_t head_stride = 0) const;
  void apply_rope_to_heads(const Tensor& x, bool inverse) const;  // every head's rotary columns
  kernels::AttentionShape attention_shape(int64_t batch) const;
  DeepConstPtr<ParamStore> ps_;  // const methods see a const store (core/deep_const.h)
  comm::Communicator* tp_;
  comm::Communicator* cp_;
  bool sp_;  // sequence parallelism over tp_
  int64_t H_, nope_, rope_dim_, v_, kv_lora_, T_;  // H_: this rank's heads; T_: this rank's rows of a sequence
  std::shared_ptr<const kernels::RopeTable> rope_;
  DeepConstOwner<Linear> q_a_, q_b_, q_;  // q_a + norm + q_b, or q alone
  DeepConstOwner<Norm> q_norm_;
  Linear kv_a_;
  Norm kv_norm_;
  Linear kv_b_, o_;
  std::string key_q_, key_k_, key_v_, key_out_, key_lse_;
};

}  // namespace tessel::nn
