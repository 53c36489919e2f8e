#pragma once
// MLP activations, each with its backward.
//   SwiGLU: gu [N, 2F] holds gate (columns [0, F)) then up ([F, 2F)), out = silu(gate) * up  [N, F].
//   GeLU (tanh approximation, GPT-2's "gelu_new"): out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// Forward inputs are fp32 GEMM outputs; outputs and input-gradients are written in the dtype the next
// GEMM reads (f32 or bf16). All matrices are dense row-major.
#include <cstdint>

#include "tessel/core/dtype.h"

namespace tessel::kernels {

template <class Ty>
void swiglu_fwd(int64_t N, int64_t F, const float* gu, Ty* out);
template <class Tg>
void swiglu_bwd(int64_t N, int64_t F, const float* gu, const float* dout, Tg* dgu);

template <class Ty>
void gelu_fwd(int64_t n, const float* x, Ty* out);
template <class Tg>
void gelu_bwd(int64_t n, const float* x, const float* dout, Tg* dx);

}  // namespace tessel::kernels
