#pragma once
// AdamW with decoupled weight decay (Loshchilov & Hutter, arXiv 1711.05101), in PyTorch's form:
//   p -= lr * wd * p;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//   p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps),  bc_i = 1 - b_i^step.
// Plus the reductions gradient clipping needs.
#include <cstdint>

#include "tessel/core/tensor.h"

namespace tessel::kernels {

struct AdamWHyper {
  float lr, beta1, beta2, eps, weight_decay;
  int64_t step;  // 1-based step count after this update
};

// The family's dispatch points (kernels/adamw.cpp), as contiguous f32 tensors on one device of n
// elements (compute_copy: bf16, or undefined). sum_squares returns its value copied to the host (a
// synchronisation on an asynchronous device); on meta there is no value: 0.
void adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const AdamWHyper& h,
                  float grad_scale, const Tensor& compute_copy);
double sum_squares(const Tensor& x);

// The cpu kernels (kernels/cpu/adamw.cpp) on raw arrays.
// g is read as grad_scale * g (gradient clipping folded into the update). When compute_copy is not
// null the updated parameters are also written there in bf16 (the GEMM weights), saving a pass.
void adamw_update(int64_t n, float* p, const float* g, float* m, float* v, const AdamWHyper& h,
                  float grad_scale = 1.0f, bf16* compute_copy = nullptr);

double sum_squares(int64_t n, const float* x);  // double accumulation

}  // namespace tessel::kernels
