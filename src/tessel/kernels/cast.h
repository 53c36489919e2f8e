#pragma once
// Bulk dtype conversion (round to nearest even) and small elementwise helpers.
#include <cstdint>

#include "tessel/core/tensor.h"

namespace tessel::kernels {

// The family's dispatch points (kernels/cast.cpp), as contiguous tensors on one device.
void cast(const Tensor& src, const Tensor& dst);                   // f32 <-> bf16, same shape
void add(const Tensor& a, const Tensor& b, const Tensor& out);     // f32, same shape; out may be a or b
void add_row_vector(const Tensor& y, const Tensor& v);             // y [N, D] f32 += v [D] f32 on every row
void column_sum_accumulate(const Tensor& x, const Tensor& out);    // out [D] f32 += sum of x's rows (f32 or bf16)

// The cpu kernels (kernels/cpu/cast.cpp) on raw arrays.

void cast_f32_to_bf16(int64_t n, const float* src, bf16* dst);
void cast_bf16_to_f32(int64_t n, const bf16* src, float* dst);
void add(int64_t n, const float* a, const float* b, float* out);  // out = a + b (out may alias)
void add_row_vector(int64_t N, int64_t D, const float* v, float* y);
// Column sums of a [N, D] matrix accumulated into out[D] (bias gradients).
template <class T>
void column_sum_accumulate(int64_t N, int64_t D, const T* x, float* out);

}  // namespace tessel::kernels
