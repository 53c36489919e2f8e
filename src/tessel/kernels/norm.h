#pragma once
// RMSNorm and LayerNorm over rows of width D, with the residual add fused in front:
//   r_out = r_in + delta            (delta may be null: r_out = r_in, and r_out may alias r_in)
//   y     = norm(r_out) * w (+ b)   y in the compute dtype (f32 or bf16)
// Saved for backward: r_out (f32) and per row rstd (and mean for LayerNorm).
// Backward: dx = dresid + d(norm)/dx^T dy (dresid may be null; dx may alias dresid), dw (and db)
// accumulated (+=) into fp32 gradients.
#include <cstdint>

#include "tessel/core/tensor.h"

namespace tessel::kernels {

enum class NormKind { rms, layer };

// The family's dispatch point (kernels/norm.cpp), as tensors on one device: r_in [N, D] f32; delta
// [N, D] f32 or undefined; r_out [N, D] f32 (may be r_in when delta is undefined); w [D] f32; b [D]
// f32 for LayerNorm, else undefined; y [N, D] f32 or bf16; mean [N] f32 for LayerNorm, else
// undefined; rstd [N] f32. Backward: dresid undefined or [N, D] f32, dx [N, D] f32, dw and db
// accumulated.
void norm_forward(NormKind kind, const Tensor& r_in, const Tensor& delta, const Tensor& r_out, const Tensor& w,
                  const Tensor& b, float eps, const Tensor& y, const Tensor& mean, const Tensor& rstd);
void norm_backward(NormKind kind, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                   const Tensor& dy, const Tensor& dresid, const Tensor& dx, const Tensor& dw, const Tensor& db);

// The cpu kernels (kernels/cpu/norm.cpp) on raw arrays.

template <class Ty>
void rmsnorm_fwd(int64_t N, int64_t D, const float* r_in, const float* delta, float* r_out, const float* w, float eps,
                 Ty* y, float* rstd);
void rmsnorm_bwd(int64_t N, int64_t D, const float* x, const float* w, const float* rstd, const float* dy,
                 const float* dresid, float* dx, float* dw);

template <class Ty>
void layernorm_fwd(int64_t N, int64_t D, const float* r_in, const float* delta, float* r_out, const float* w,
                   const float* b, float eps, Ty* y, float* mean, float* rstd);
void layernorm_bwd(int64_t N, int64_t D, const float* x, const float* w, const float* mean, const float* rstd,
                   const float* dy, const float* dresid, float* dx, float* dw, float* db);

}  // namespace tessel::kernels
