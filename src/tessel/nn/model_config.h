#pragma once
// The model section of a config (key names as Megatron-LM names them; DESIGN.md section 5).
#include <cstdint>
#include <string>

#include "tessel/core/dtype.h"
#include "tessel/nn/fp8_recipe.h"

namespace tessel::nn {

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
  DType compute = DType::f32;       // f32 | bf16 (GEMM inputs; accumulation and master weights fp32)
  // Runtime layout, not model shape (from the parallel section): activations outside the
  // tensor-parallel GEMMs split by rows over the tensor-parallel group (sequence_parallel.h).
  bool sequence_parallel = false;
  Fp8Recipe fp8;  // from precision.fp8: the transformer layers' Linears in FP8 when enabled

  bool is_llama() const { return arch == "llama"; }
  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  void validate() const;  // throws tessel::Error naming the bad key and what is allowed
  // Matmul parameters (excluding embeddings) and training FLOPs per token (6N + causal attention).
  int64_t num_params() const;
  double train_flops_per_token() const;
};

}  // namespace tessel::nn
