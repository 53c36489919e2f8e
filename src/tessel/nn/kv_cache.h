#pragma once
// Keys and values of every layer for the positions decoded so far (inference with a KV cache).
#include <vector>

#include "tessel/core/tensor.h"

namespace tessel::nn {

struct KVCache {
  std::vector<Tensor> k, v;  // per layer [max_positions, G * Dh] f32 (keys after RoPE)
  int64_t length = 0;        // positions filled
  int64_t capacity() const { return k.empty() ? 0 : k[0].size(0); }
};

}  // namespace tessel::nn
