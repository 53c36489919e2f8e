#pragma once
// Moving per-head column blocks between tensors laid out as [rows, heads x head width] (attention
// heads of different widths: MLA assembles its keys and values from a latent projection and a
// shared rotary key, and slices the value columns out of the padded attention output).
#include <cstdint>

#include "tessel/core/tensor.h"

namespace tessel::kernels {

// The family's dispatch points (kernels/heads.cpp), on contiguous 2-D tensors of one device with
// the same rows and dtype (f32, or bf16 for the copy).
//
// copy_head_columns: for every row n, head h < heads and j < width,
//   dst[n, h * dst_stride + dst_col + j] = src[n, h * src_stride + src_col + j];
// src_stride 0 broadcasts one block of src to every head.
void copy_head_columns(const Tensor& src, int64_t src_stride, int64_t src_col, const Tensor& dst, int64_t dst_stride,
                       int64_t dst_col, int64_t width, int64_t heads);
// sum_head_columns: dst [rows, width] f32 += sum over heads h (in head order) of
//   src[n, h * src_stride + src_col + j] (the gradient of a block broadcast by copy_head_columns).
void sum_head_columns(const Tensor& src, int64_t src_stride, int64_t src_col, const Tensor& dst, int64_t width,
                      int64_t heads);

// The cpu kernels (kernels/cpu/heads.cpp) on raw arrays (element size es bytes; leading dimensions
// in elements).
void copy_head_columns(int64_t rows, size_t es, const void* src, int64_t ld_src, int64_t src_stride, int64_t src_col,
                       void* dst, int64_t ld_dst, int64_t dst_stride, int64_t dst_col, int64_t width, int64_t heads);
void sum_head_columns(int64_t rows, const float* src, int64_t ld_src, int64_t src_stride, int64_t src_col, float* dst,
                      int64_t width, int64_t heads);

}  // namespace tessel::kernels
