#pragma once
// Rotary position embedding, Hugging Face "rotate half" convention (Su et al., RoFormer, arXiv 2104.09864):
//   inv_freq[j] = base^(-2j/Dh), angle = pos * inv_freq[j] for j < Dh/2,
//   y[:Dh/2] = x1 cos - x2 sin,  y[Dh/2:] = x2 cos + x1 sin.
// Backward is the rotation by -angle. Applied in place to `heads` consecutive heads of Dh columns
// in each row of x (row r has position r % T), rows strided by ld.
#include <cstdint>
#include <memory>
#include <vector>

#include "tessel/core/tensor.h"

namespace tessel::kernels {

struct RopeTable {
  RopeTable(int64_t T, int64_t Dh, double base);
  // The process's one table of these sizes (constant once made; a planner builds many models of
  // the same sequence length, each of which would otherwise compute its T x Dh/2 angles again).
  static std::shared_ptr<const RopeTable> shared(int64_t T, int64_t Dh, double base);
  int64_t T, half;
  std::vector<float> cos, sin;  // [T, Dh/2]
};

// pos0 < 0: row r has position r % T (a [B, T] batch). pos0 >= 0: rows are consecutive positions
// pos0, pos0 + 1, ... of one sequence (incremental decoding). head_stride: columns from one head's
// first rotated column to the next head's (0: Dh, heads back to back; multi-latent attention rotates
// the last `rope` columns of heads of nope + rope columns).
void rope_apply(const RopeTable& tab, int64_t rows, int64_t heads, float* x, int64_t ld, bool inverse,
                int64_t pos0 = -1, int64_t head_stride = 0);

// The family's dispatch point (kernels/rope.cpp): x [rows, (heads - 1) * head_stride + Dh] f32
// (head_stride 0: [rows, heads * Dh]), rows strided (a column slice of a fused projection is fine),
// the Dh columns of each head rotated in place, the columns between heads untouched; the table
// stays on the host (it is constant: a device keeps its own copy). One call for all heads.
void rope(const RopeTable& tab, const Tensor& x, int64_t heads, bool inverse, int64_t pos0 = -1,
          int64_t head_stride = 0);

}  // namespace tessel::kernels
