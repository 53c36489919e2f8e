#pragma once
// Hugging Face interop. Llama flavour: config.json for LlamaForCausalLM and model.safetensors in
// Hugging Face Llama naming (tessel's own parameter names are that naming). Mixtral flavour: MoE
// blocks as block_sparse_moe.{gate, experts.<e>.w1/w2/w3}. GPT-2 flavour: GPT2LMHeadModel naming
// (transformer.wte, transformer.h.N.attn.c_attn, ...) with its Conv1D layout, i.e. weights stored
// [in, out], and q/k/v fused into c_attn.
// DeepSeek-V3 flavour (multi-latent attention models): DeepseekV3ForCausalLM (transformers, and
// DeepSeek's modeling_deepseek.py): tessel's names are Hugging Face's; the RoPE rows of q_proj /
// q_b_proj (per head) and kv_a_proj_with_mqa are stored interleaved (Hugging Face de-interleaves them
// before its rotate-half; tessel rotates halves directly); the expert bias (state, not a parameter
// here) is mlp.gate.e_score_correction_bias, shifted up so that none is negative when any is (the
// selection is unchanged, and Hugging Face's group mask, which sets the dropped groups' experts to
// 0 rather than -inf, never outranks a kept expert); the multi-token-prediction modules are layers
// num_hidden_layers + k with copies of the embedding and output head (embed_tokens,
// shared_head.head).
// Import reads model.safetensors or a sharded set listed in model.safetensors.index.json
// (F32, BF16 or F16 tensors). Each family lives in its own file (hf_llama.cpp for Llama and
// Mixtral, hf_gpt2.cpp, hf_deepseek.cpp; shared parts in hf_common.*); this file dispatches.
#include <nlohmann/json_fwd.hpp>

#include <string>
#include <vector>

#include "tessel/nn/model.h"
#include "tessel/nn/model_config.h"
#include "tessel/nn/params.h"

namespace tessel::ckpt {

// state: the model's training state by name (nn::Model::state_tensors: the MoE expert biases, kept
// for a DeepSeek-V3 export). Returns the flavour written ("Hugging Face Llama", ...). Throws, naming
// the setting, for a model the flavour cannot express.
std::string export_hf(const nn::ModelConfig& cfg, const nn::ParamStore& params, const std::string& out_dir,
                      const std::vector<std::pair<std::string, Tensor>>& state = {});

// A Hugging Face config.json, typed: the model it describes and what the tensor import needs.
struct HfConfig {
  std::string model_type;         // llama | mixtral | gpt2 | deepseek_v3
  nn::ModelConfig model;
  bool rope_interleaved = false;  // DeepSeek-V3's rope_interleave: q_pe / k_pe rows stored interleaved
  std::vector<std::string> warnings;  // settings read but not applied (training-time dropout, noise)
};
// Reads config.json's content. `file` names it in messages. Anything missing, of the wrong type, out
// of range or not implemented (rope_scaling, another activation, biases, ...) throws a tessel::Error
// naming the file and the key; no other exception escapes (the entry point for fuzzing).
HfConfig parse_hf_config(const nlohmann::json& cfg, const std::string& file);
HfConfig parse_hf_config_text(const std::string& text, const std::string& file);

struct HfImport {
  nn::ModelConfig model;                                 // from config.json
  std::string model_type;                                // config.json's model_type
  std::string source;                                    // where the tensors came from (for messages)
  std::vector<std::pair<std::string, Tensor>> tensors;  // tessel names, f32
  std::vector<std::pair<std::string, Tensor>> state;    // training state by tessel name (MoE expert biases)
  std::vector<std::string> warnings;                    // what was read but not kept
};
HfImport import_hf(const std::string& dir);

// Copies an import's tensors into the model it describes (parameters and training state). Every
// parameter must be imported (a missing one is named by its Hugging Face name: none is left at its
// initial value), with the shape the config implies; a tensor the model has no place for is named
// too, and so is a missing expert bias (it steers routing). Returns warnings for tessel's own state
// that starts afresh (FP8 scaling histories).
std::vector<std::string> copy_into(const HfImport& imp, nn::Model& model);

// The config overrides ("model.<key>=<value>") that rebuild an imported model.
std::vector<std::string> model_overrides(const nn::ModelConfig& m);

}  // namespace tessel::ckpt
