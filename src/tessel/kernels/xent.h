#pragma once
// Softmax cross-entropy fused with its gradient: one sweep over each row of logits gives the loss
// and dlogits = (softmax(logits) - onehot(target)) * grad_scale. fp32 math throughout.
// Rows whose target is negative are ignored (no loss, zero gradient).
#include <cstdint>

#include "tessel/core/dtype.h"

namespace tessel::kernels {

// logits [N, V] (f32, dense). Returns the summed loss over rows (double). dlogits may be null
// (forward only) and may alias logits when Tg is float. row_loss (optional) gets each row's loss.
template <class Tg>
double softmax_xent(int64_t N, int64_t V, const float* logits, const int64_t* targets, float grad_scale, Tg* dlogits,
                    float* row_loss = nullptr);

}  // namespace tessel::kernels
