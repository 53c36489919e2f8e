#include "tessel/nn/model_config.h"

#include "tessel/core/check.h"

namespace tessel::nn {

void ModelConfig::validate() const {
  TESSEL_CHECK(arch == "llama" || arch == "gpt2", "model.arch: '{}' is not supported (allowed: llama, gpt2)", arch);
  auto positive = [](const char* key, int64_t v) {
    TESSEL_CHECK(v > 0, "model.{} must be a positive integer, got {}", key, v);
  };
  positive("num_layers", num_layers);
  positive("hidden_size", hidden_size);
  positive("num_attention_heads", num_attention_heads);
  positive("num_query_groups", num_query_groups);
  positive("ffn_hidden_size", ffn_hidden_size);
  positive("vocab_size", vocab_size);
  positive("seq_length", seq_length);
  TESSEL_CHECK(hidden_size % num_attention_heads == 0,
               "model.hidden_size ({}) must be divisible by model.num_attention_heads ({})", hidden_size,
               num_attention_heads);
  TESSEL_CHECK(num_attention_heads % num_query_groups == 0,
               "model.num_attention_heads ({}) must be divisible by model.num_query_groups ({})", num_attention_heads,
               num_query_groups);
  TESSEL_CHECK(!is_llama() || head_dim() % 2 == 0, "RoPE needs an even head dimension; hidden_size/heads = {}",
               head_dim());
  TESSEL_CHECK(norm_epsilon > 0, "model.norm_epsilon must be > 0, got {}", norm_epsilon);
  TESSEL_CHECK(rotary_base > 1, "model.rotary_base must be > 1, got {}", rotary_base);
  TESSEL_CHECK(compute == DType::f32 || compute == DType::bf16,
               "precision.compute: '{}' is not supported (allowed: fp32, bf16)", dtype_name(compute));
}

int64_t ModelConfig::num_params() const {
  const int64_t d = hidden_size, dh = head_dim();
  const int64_t attn = d * (num_attention_heads + 2 * num_query_groups) * dh + num_attention_heads * dh * d;
  const int64_t mlp = (is_llama() ? 3 : 2) * d * ffn_hidden_size;
  return num_layers * (attn + mlp);
}

double ModelConfig::train_flops_per_token() const {
  // 6 x (matmul params + LM head) + causal attention: QK^T and PV, 2 x 2 x T x d per layer forward,
  // halved by the causal mask, times 3 for forward + backward (REFERENCE.md).
  const double head = double(vocab_size) * double(hidden_size);
  const double attn = 6.0 * 2.0 * double(num_layers) * double(seq_length) * double(hidden_size) / 2.0;
  return 6.0 * (double(num_params()) + head) + attn;
}

}  // namespace tessel::nn
