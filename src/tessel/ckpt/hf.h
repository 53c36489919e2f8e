#pragma once
// Hugging Face interop. Llama flavour: config.json for LlamaForCausalLM and model.safetensors in
// Hugging Face Llama naming (tessel's own parameter names are that naming). GPT-2 flavour:
// GPT2LMHeadModel naming (transformer.wte, transformer.h.N.attn.c_attn, ...) with its Conv1D
// layout, i.e. weights stored [in, out], and q/k/v fused into c_attn.
// Import reads model.safetensors or a sharded set listed in model.safetensors.index.json
// (F32, BF16 or F16 tensors).
#include <string>
#include <vector>

#include "tessel/nn/params.h"
#include "tessel/train/config.h"

namespace tessel::ckpt {

void export_hf(const nn::ModelConfig& cfg, const nn::ParamStore& params, const std::string& out_dir);

struct HfImport {
  nn::ModelConfig model;                                 // from config.json
  std::vector<std::pair<std::string, Tensor>> tensors;  // tessel names, f32
};
HfImport import_hf(const std::string& dir);

}  // namespace tessel::ckpt
