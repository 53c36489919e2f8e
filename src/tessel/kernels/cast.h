#pragma once
// Bulk dtype conversion (round to nearest even) and small elementwise helpers.
#include <cstdint>

#include "tessel/core/dtype.h"

namespace tessel::kernels {

void cast_f32_to_bf16(int64_t n, const float* src, bf16* dst);
void cast_bf16_to_f32(int64_t n, const bf16* src, float* dst);
void add(int64_t n, const float* a, const float* b, float* out);  // out = a + b (out may alias)
// Column sums of a [N, D] matrix accumulated into out[D] (bias gradients).
template <class T>
void column_sum_accumulate(int64_t N, int64_t D, const T* x, float* out);

}  // namespace tessel::kernels
