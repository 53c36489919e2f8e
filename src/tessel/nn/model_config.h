#pragma once
// The model section of a config (key names as Megatron-LM names them; DESIGN.md section 5).
#include <cstdint>
#include <string>

#include "tessel/core/dtype.h"
#include "tessel/nn/fp8_recipe.h"

namespace tessel::nn {

// Upper bounds on model sizes, several times the largest published model's (docs/configs.md): a
// mistyped size is refused at once instead of running setup for hours. What fits under them is
// checked against the machine's memory when the parameters are allocated (ParamStore::finalize).
struct ModelLimits {
  static constexpr int64_t layers = 1024;             // Llama 3.1 405B: 126
  static constexpr int64_t hidden_size = 131072;      // Megatron-Turing NLG 530B: 20480
  static constexpr int64_t attention_heads = 1024;    // 128
  static constexpr int64_t ffn_hidden_size = 1048576; // PaLM 540B: 73728
  static constexpr int64_t vocab_size = 4194304;      // Gemma 3: 262144
  static constexpr int64_t seq_length = 16777216;     // Llama 4 Scout's context: 10M
  static constexpr int64_t experts = 4096;            // DeepSeek-V3: 256, Kimi K2: 384
};

struct ModelConfig {
  std::string arch = "llama";  // llama | gpt2
  int64_t num_layers = 2;
  int64_t hidden_size = 64;
  int64_t num_attention_heads = 4;
  int64_t num_query_groups = 4;  // kv heads (GQA); = heads for MHA
  int64_t ffn_hidden_size = 128;
  int64_t vocab_size = 256;
  int64_t seq_length = 64;
  double norm_epsilon = 1e-5;
  double rotary_base = 10000.0;
  bool tie_embeddings = false;
  double init_method_std = 0.02;
  bool recompute = false;           // full-layer activation recompute
  // Mixture of Experts (num_experts > 0; Megatron's names): every layer from moe_first_dense_layers
  // on replaces its MLP by a router, moe_router_topk of num_experts routed SwiGLU experts of
  // moe_ffn_hidden_size and an optional shared expert of moe_shared_expert_intermediate_size.
  int64_t num_experts = 0;
  int64_t moe_router_topk = 2;
  int64_t moe_ffn_hidden_size = 0;  // 0: ffn_hidden_size
  int64_t moe_shared_expert_intermediate_size = 0;
  int64_t moe_first_dense_layers = 0;
  std::string moe_router_score_function = "softmax";  // softmax | sigmoid
  bool moe_router_norm_topk_prob = true;              // gate weights of the chosen experts sum to 1
  double moe_router_topk_scaling_factor = 1.0;
  int64_t moe_router_num_groups = 1, moe_router_group_topk = 1;  // group-limited (node-limited) routing
  bool moe_router_enable_expert_bias = false;         // auxiliary-loss-free balancing
  double moe_router_bias_update_rate = 1e-3;          // gamma
  std::string moe_router_load_balancing_type = "none";  // none | seq_aux_loss | aux_loss
  double moe_aux_loss_coeff = 0.0;                    // alpha
  double moe_z_loss_coeff = 0.0;
  double moe_expert_capacity_factor = 0.0;        // 0: no token dropped
  std::string moe_token_drop_policy = "probs";    // probs | position
  // Multi-head latent attention (DeepSeek-V3; Megatron's names): arch deepseek_v3 turns it on.
  bool multi_latent_attention = false;
  int64_t q_lora_rank = 0;   // 0: queries straight from the hidden state
  int64_t kv_lora_rank = 32;
  int64_t qk_head_dim = 16;          // per-head query/key dims without RoPE ("nope")
  int64_t qk_pos_emb_head_dim = 8;   // the decoupled RoPE dims (one key shared by all heads)
  int64_t v_head_dim = 16;
  // Multi-token prediction (DeepSeek-V3 section 2.2; Megatron's names): mtp_num_layers modules after
  // the main model, module k predicting the token k + 1 ahead, loss weight mtp_loss_scaling_factor / D.
  int64_t mtp_num_layers = 0;
  double mtp_loss_scaling_factor = 0.1;
  bool mla() const { return multi_latent_attention || arch == "deepseek_v3"; }
  bool is_moe_layer(int64_t layer) const { return num_experts > 0 && layer >= moe_first_dense_layers; }
  int64_t expert_ffn() const { return moe_ffn_hidden_size > 0 ? moe_ffn_hidden_size : ffn_hidden_size; }
  DType compute = DType::f32;       // f32 | bf16 (GEMM inputs; accumulation and master weights fp32)
  // precision.fp32_embedding: the token table looked up in fp32; false, from the compute copy (bf16 runs).
  bool fp32_embedding = true;
  bool embedding_in_compute_dtype() const { return !fp32_embedding && compute != DType::f32; }
  // Runtime layout, not model shape (from the parallel section): activations outside the
  // tensor-parallel GEMMs split by rows over the tensor-parallel group (sequence_parallel.h).
  bool sequence_parallel = false;
  // MoE experts split over the tensor-parallel group like the MLP (parallel.expert_tensor_parallel_size);
  // false: replicated on it.
  bool expert_tensor_parallel = false;
  Fp8Recipe fp8;  // from precision.fp8: the transformer layers' Linears in FP8 when enabled

  bool is_llama() const { return arch != "gpt2"; }  // llama, mixtral, deepseek_v3: RMSNorm, RoPE, SwiGLU
  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  void validate() const;  // throws tessel::Error naming the bad key and what is allowed
  // Matmul parameters (excluding embeddings) and training FLOPs per token (6N + causal attention).
  int64_t num_params() const;
  double train_flops_per_token() const;
};

}  // namespace tessel::nn
