#pragma once
// What the checkpoint tests share: a one-layer model small enough to save in milliseconds, a scratch
// directory, and a deterministic update that moves parameters and moments away from their start.
#include <vector>

#include "support/host_access.h"
#include "support/scratch_dir.h"
#include "tessel/nn/model.h"
#include "tessel/optim/adamw.h"

namespace tessel::testing {

inline nn::ModelConfig tiny_checkpoint_model(int64_t hidden = 32) {
  nn::ModelConfig c;
  c.num_layers = 1;
  c.hidden_size = hidden;
  c.num_attention_heads = 4;
  c.num_query_groups = 2;
  c.ffn_hidden_size = 40;
  c.vocab_size = 23;
  c.seq_length = 8;
  return c;
}

// A scratch directory for one checkpoint test, /tmp/<tag>-XXXXXX.
struct CheckpointScratch : ScratchDir {
  explicit CheckpointScratch(const std::string& tag = "tessel-ckpt") : ScratchDir(tag) {}
};

// Moves the model and optimizer state one (deterministic) update away.
inline void perturb(nn::Model& m, optim::AdamW& opt, float g) {
  {
    const HostAccess host;  // gradients written from the host: an upload
    for (int64_t i = 0; i < m.params().numel(); ++i) m.params().grads_data()[i] = g * float((i % 7) - 3);
  }
  opt.step(1e-2);
}

// n values from where pointer() says, both under host access (a device pointer is reached inside it).
template <class F>
std::vector<float> host_values(F&& pointer, int64_t n) {
  const HostAccess host;
  const float* p = pointer();
  return {p, p + n};
}

inline std::vector<float> snapshot(const nn::Model& m) {
  return host_values([&] { return m.params().params_data(); }, m.params().numel());
}

}  // namespace tessel::testing
