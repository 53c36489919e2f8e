#pragma once
// Tiny model configs (YAML text) shared by the tests that build a Trainer from a config: small enough
// for a step in milliseconds, with every structural feature of the family (GQA, untied head, SwiGLU
// for Llama; learned positions, tied head, GELU for GPT-2; routed experts for Mixtral).
namespace tessel::testing {

inline constexpr const char* kTinyLlamaYaml = R"(
model:
  arch: llama
  num_layers: 4
  hidden_size: 64
  num_attention_heads: 4
  num_query_groups: 2
  ffn_hidden_size: 96
  vocab_size: 512
  seq_length: 32
train:
  micro_batch_size: 2
  global_batch_size: 8
precision:
  compute: bf16
)";

inline constexpr const char* kTinyGpt2Yaml = R"(
model:
  arch: gpt2
  num_layers: 4
  hidden_size: 64
  num_attention_heads: 4
  ffn_hidden_size: 256
  vocab_size: 512
  seq_length: 32
train:
  micro_batch_size: 2
  global_batch_size: 8
precision:
  compute: bf16
)";

inline constexpr const char* kTinyMixtralYaml = R"(
model:
  arch: mixtral
  num_layers: 4
  hidden_size: 64
  num_attention_heads: 4
  num_query_groups: 2
  ffn_hidden_size: 96
  num_experts: 8
  moe_router_topk: 2
  vocab_size: 512
  seq_length: 32
train:
  micro_batch_size: 1
  global_batch_size: 8
precision:
  compute: bf16
)";

// configs/deepseek-v3-tiny.yaml at a smaller vocabulary and sequence: MLA, a dense first layer then
// MoE layers with a shared expert, group-limited sigmoid routing, the balance loss, one MTP module.
inline constexpr const char* kTinyDeepSeekYaml = R"(
model:
  arch: deepseek_v3
  num_layers: 4
  hidden_size: 128
  num_attention_heads: 4
  num_query_groups: 4
  ffn_hidden_size: 384
  q_lora_rank: 64
  kv_lora_rank: 32
  qk_head_dim: 32
  qk_pos_emb_head_dim: 16
  v_head_dim: 32
  num_experts: 8
  moe_router_topk: 2
  moe_ffn_hidden_size: 96
  moe_shared_expert_intermediate_size: 96
  moe_first_dense_layers: 1
  moe_router_score_function: sigmoid
  moe_router_num_groups: 4
  moe_router_group_topk: 2
  moe_router_topk_scaling_factor: 2.5
  moe_router_enable_expert_bias: true
  moe_router_load_balancing_type: seq_aux_loss
  moe_aux_loss_coeff: 1.0e-4
  mtp_num_layers: 1
  mtp_loss_scaling_factor: 0.3
  vocab_size: 512
  seq_length: 32
train:
  micro_batch_size: 2
  global_batch_size: 8
precision:
  compute: bf16
)";

}  // namespace tessel::testing
