#pragma once
// A micro-batch of token ids: what every data source produces and the training step consumes.
#include "tessel/core/tensor.h"

namespace tessel::data {

struct Batch {
  Tensor tokens;   // [B, T] i64
  Tensor targets;  // [B, T] i64, tokens shifted by one
};

}  // namespace tessel::data
