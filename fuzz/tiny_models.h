#pragma once
// Tiny models written by tessel's own writers, shared by the seed generator (make_seeds.cpp) and the
// harnesses that need real files around the input they fuzz (a Hugging Face directory's tensors, a
// checkpoint's safetensors files).
#include <filesystem>
#include <string>
#include <vector>

#include "tessel/nn/model_config.h"

namespace tessel::fuzz {

// The Hugging Face flavours export_hf writes: "llama", "mixtral", "gpt2", "deepseek_v3".
const std::vector<std::string>& hf_flavours();
nn::ModelConfig tiny_model(const std::string& flavour);

// export_hf of the tiny model of this flavour (config.json, model.safetensors) into dir.
void export_tiny_hf(const std::string& flavour, const std::filesystem::path& dir);

// A checkpoint directory with two saves of the tiny Llama (step_00000001, step_00000002; `latest`
// names step 2), as `tessel train` leaves it. Returns the model configuration saved.
nn::ModelConfig save_tiny_checkpoints(const std::filesystem::path& dir);
// The same model's step 1 as a distributed checkpoint (checkpoint.distributed, one rank).
void save_tiny_distributed_checkpoint(const std::filesystem::path& dir);

}  // namespace tessel::fuzz
