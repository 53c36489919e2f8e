#include "tessel/nn/model_config.h"

#include <algorithm>
#include <utility>

#include "tessel/core/check.h"

namespace tessel::nn {

void ModelConfig::validate() const {
  TESSEL_CHECK(arch == "llama" || arch == "gpt2" || arch == "mixtral" || arch == "deepseek_v3",
               "model.arch: '{}' is not supported (allowed: llama, gpt2, mixtral, deepseek_v3)", arch);
  if (mla()) {
    TESSEL_CHECK(arch != "gpt2", "model.multi_latent_attention needs a llama-family arch, not gpt2");
    TESSEL_CHECK(kv_lora_rank > 0 && qk_head_dim > 0 && qk_pos_emb_head_dim > 0 && qk_pos_emb_head_dim % 2 == 0 &&
                     v_head_dim > 0 && v_head_dim <= qk_head_dim + qk_pos_emb_head_dim && q_lora_rank >= 0,
                 "multi-latent attention: model.kv_lora_rank {}, qk_head_dim {}, qk_pos_emb_head_dim {} (even), "
                 "v_head_dim {} (at most qk_head_dim + qk_pos_emb_head_dim) must be positive, q_lora_rank {} >= 0",
                 kv_lora_rank, qk_head_dim, qk_pos_emb_head_dim, v_head_dim, q_lora_rank);
    for (auto [key, v] : {std::pair{"model.q_lora_rank", q_lora_rank}, {"model.kv_lora_rank", kv_lora_rank},
                          {"model.qk_head_dim", qk_head_dim}, {"model.qk_pos_emb_head_dim", qk_pos_emb_head_dim},
                          {"model.v_head_dim", v_head_dim}})
      TESSEL_CHECK_RANGE(key, v, 0, ModelLimits::hidden_size);
  }
  TESSEL_CHECK(arch != "mixtral" || num_experts > 0, "model.arch mixtral needs model.num_experts > 0");
  TESSEL_CHECK(num_experts == 0 || arch != "gpt2", "Mixture-of-Experts layers are SwiGLU (model.arch llama or "
               "mixtral), not gpt2");
  if (num_experts > 0) {
    TESSEL_CHECK(moe_router_topk >= 1 && moe_router_topk <= num_experts,
                 "model.moe_router_topk must be in [1, num_experts = {}], got {}", num_experts, moe_router_topk);
    TESSEL_CHECK(moe_router_score_function == "softmax" || moe_router_score_function == "sigmoid",
                 "model.moe_router_score_function: '{}' is not supported (allowed: softmax, sigmoid)",
                 moe_router_score_function);
    TESSEL_CHECK(moe_router_num_groups >= 1 && num_experts % moe_router_num_groups == 0 &&
                     moe_router_group_topk >= 1 && moe_router_group_topk <= moe_router_num_groups &&
                     moe_router_topk <= moe_router_group_topk * (num_experts / moe_router_num_groups),
                 "model.moe_router_num_groups {} / moe_router_group_topk {}: the groups must divide num_experts {} "
                 "and hold at least moe_router_topk {} experts", moe_router_num_groups, moe_router_group_topk,
                 num_experts, moe_router_topk);
    TESSEL_CHECK(moe_router_load_balancing_type == "none" || moe_router_load_balancing_type == "seq_aux_loss" ||
                     moe_router_load_balancing_type == "aux_loss",
                 "model.moe_router_load_balancing_type: '{}' is not supported (allowed: none, seq_aux_loss, aux_loss)",
                 moe_router_load_balancing_type);
    TESSEL_CHECK(moe_expert_capacity_factor >= 0, "model.moe_expert_capacity_factor must be >= 0 (0: no dropping), got {}",
                 moe_expert_capacity_factor);
    TESSEL_CHECK(moe_token_drop_policy == "probs" || moe_token_drop_policy == "position",
                 "model.moe_token_drop_policy: '{}' is not supported (allowed: probs, position)", moe_token_drop_policy);
    TESSEL_CHECK_MIN("model.moe_first_dense_layers", moe_first_dense_layers, 0);
    // The multi-token-prediction modules' layers count on after the model's (is_moe_layer).
    TESSEL_CHECK(moe_first_dense_layers <= num_layers + mtp_num_layers,
                 "model.moe_first_dense_layers: {} is more than the model's {} layers (num_layers {} + mtp_num_layers "
                 "{}); the first layers are dense, the rest MoE (all of them: no MoE layer)",
                 moe_first_dense_layers, num_layers + mtp_num_layers, num_layers, mtp_num_layers);
    TESSEL_CHECK_RANGE("model.moe_ffn_hidden_size", moe_ffn_hidden_size, 0, ModelLimits::ffn_hidden_size);
    TESSEL_CHECK_RANGE("model.moe_shared_expert_intermediate_size", moe_shared_expert_intermediate_size, 0,
                       ModelLimits::ffn_hidden_size);
    TESSEL_CHECK(moe_router_topk_scaling_factor > 0, "model.moe_router_topk_scaling_factor must be > 0, got {}",
                 moe_router_topk_scaling_factor);
    TESSEL_CHECK_MIN("model.moe_router_bias_update_rate", moe_router_bias_update_rate, 0.0);
    TESSEL_CHECK_MIN("model.moe_aux_loss_coeff", moe_aux_loss_coeff, 0.0);
    TESSEL_CHECK_MIN("model.moe_z_loss_coeff", moe_z_loss_coeff, 0.0);
  }
  using L = ModelLimits;
  TESSEL_CHECK_RANGE("model.num_layers", num_layers, 1, L::layers);
  TESSEL_CHECK_RANGE("model.hidden_size", hidden_size, 1, L::hidden_size);
  TESSEL_CHECK_RANGE("model.num_attention_heads", num_attention_heads, 1, L::attention_heads);
  TESSEL_CHECK_RANGE("model.num_query_groups", num_query_groups, 1, L::attention_heads);
  TESSEL_CHECK_RANGE("model.ffn_hidden_size", ffn_hidden_size, 1, L::ffn_hidden_size);
  TESSEL_CHECK_RANGE("model.vocab_size", vocab_size, 1, L::vocab_size);
  TESSEL_CHECK_RANGE("model.seq_length", seq_length, 1, L::seq_length);
  TESSEL_CHECK_RANGE("model.num_experts", num_experts, 0, L::experts);
  TESSEL_CHECK_RANGE("model.mtp_num_layers", mtp_num_layers, 0, L::layers);
  TESSEL_CHECK_MIN("model.init_method_std", init_method_std, 0.0);
  TESSEL_CHECK(hidden_size % num_attention_heads == 0,
               "model.hidden_size ({}) must be divisible by model.num_attention_heads ({})", hidden_size,
               num_attention_heads);
  TESSEL_CHECK(num_attention_heads % num_query_groups == 0,
               "model.num_attention_heads ({}) must be divisible by model.num_query_groups ({})", num_attention_heads,
               num_query_groups);
  TESSEL_CHECK(!is_llama() || mla() || head_dim() % 2 == 0,
               "RoPE needs an even head dimension; hidden_size/heads = {}", head_dim());
  TESSEL_CHECK(mtp_num_layers >= 0 && mtp_loss_scaling_factor >= 0,
               "model.mtp_num_layers ({}) and mtp_loss_scaling_factor ({}) must be >= 0", mtp_num_layers,
               mtp_loss_scaling_factor);
  TESSEL_CHECK(mtp_num_layers == 0 || is_llama(), "multi-token prediction needs a llama-family arch, not gpt2");
  TESSEL_CHECK(norm_epsilon > 0, "model.norm_epsilon must be > 0, got {}", norm_epsilon);
  TESSEL_CHECK(rotary_base > 1, "model.rotary_base must be > 1, got {}", rotary_base);
  TESSEL_CHECK(compute == DType::f32 || compute == DType::bf16,
               "precision.compute: '{}' is not supported (allowed: fp32, bf16)", dtype_name(compute));
}

int64_t ModelConfig::num_params() const {
  const int64_t d = hidden_size, dh = head_dim(), H = num_attention_heads;
  const int64_t qk = qk_head_dim + qk_pos_emb_head_dim;
  const int64_t attn =
      mla() ? (q_lora_rank > 0 ? d * q_lora_rank + q_lora_rank * H * qk : d * H * qk) +
                  d * (kv_lora_rank + qk_pos_emb_head_dim) + kv_lora_rank * H * (qk_head_dim + v_head_dim) +
                  H * v_head_dim * d
            : d * (H + 2 * num_query_groups) * dh + H * dh * d;
  const int64_t mlp = (is_llama() ? 3 : 2) * d * ffn_hidden_size;
  // Active parameters per token of an MoE layer's MLP: k routed experts, the shared expert, the router.
  const int64_t moe = 3 * d * (moe_router_topk * expert_ffn() + moe_shared_expert_intermediate_size) + num_experts * d;
  int64_t total = 0;
  for (int64_t l = 0; l < num_layers + mtp_num_layers; ++l) total += attn + (is_moe_layer(l) ? moe : mlp);
  // A multi-token-prediction module also projects [emb; h] (2d -> d) and runs the shared head (added
  // in train_flops_per_token with the main head).
  return total + mtp_num_layers * 2 * d * d;
}

double ModelConfig::train_flops_per_token() const {
  // 6 x (matmul params + LM head) + causal attention: QK^T and PV, 2 x 2 x T x d per layer forward,
  // halved by the causal mask, times 3 for forward + backward (REFERENCE.md).
  const double head = double(1 + mtp_num_layers) * double(vocab_size) * double(hidden_size);
  // Attention's QK^T and PV use the head dims: MLA's query/key (nope + rope) and value dims per head.
  const double width = mla() ? double(num_attention_heads) * double(qk_head_dim + qk_pos_emb_head_dim + v_head_dim) / 2.0
                             : double(hidden_size);
  const double attn = 6.0 * 2.0 * double(num_layers + mtp_num_layers) * double(seq_length) * width / 2.0;
  return 6.0 * (double(num_params()) + head) + attn;
}

}  // namespace tessel::nn
