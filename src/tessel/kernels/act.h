#pragma once
// MLP activations, each with its backward.
//   SwiGLU: gu [N, 2F] holds gate (columns [0, F)) then up ([F, 2F)), out = silu(gate) * up  [N, F].
//   GeLU (tanh approximation, GPT-2's "gelu_new"): out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// Forward inputs are fp32 GEMM outputs; outputs and input-gradients are written in the dtype the next
// GEMM reads (f32 or bf16). All matrices are dense row-major.
#include <cstdint>

#include "tessel/core/tensor.h"

namespace tessel::kernels {

enum class Activation { swiglu, gelu };

// The family's dispatch point (kernels/act.cpp), as tensors on one device. SwiGLU: in [N, 2F] f32,
// out [N, F]; GeLU: in and out of one shape. out and din in f32 or bf16, dout f32.
void activation_forward(Activation kind, const Tensor& in, const Tensor& out);
void activation_backward(Activation kind, const Tensor& in, const Tensor& dout, const Tensor& din);

// The cpu kernels (kernels/cpu/act.cpp) on raw arrays.

template <class Ty>
void swiglu_fwd(int64_t N, int64_t F, const float* gu, Ty* out);
template <class Tg>
void swiglu_bwd(int64_t N, int64_t F, const float* gu, const float* dout, Tg* dgu);

template <class Ty>
void gelu_fwd(int64_t n, const float* x, Ty* out);
template <class Tg>
void gelu_bwd(int64_t n, const float* x, const float* dout, Tg* dx);

}  // namespace tessel::kernels
