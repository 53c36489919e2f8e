// The cpu kernels of the head-columns family (kernels/heads.h).
#include <cstring>

#include "tessel/kernels/heads.h"

namespace tessel::kernels {

void copy_head_columns(int64_t rows, size_t es, const void* src, int64_t ld_src, int64_t src_stride, int64_t src_col,
                       void* dst, int64_t ld_dst, int64_t dst_stride, int64_t dst_col, int64_t width, int64_t heads) {
  const auto* s = static_cast<const char*>(src);
  auto* d = static_cast<char*>(dst);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < rows; ++n)
    for (int64_t h = 0; h < heads; ++h)
      std::memcpy(d + size_t(n * ld_dst + h * dst_stride + dst_col) * es,
                  s + size_t(n * ld_src + h * src_stride + src_col) * es, size_t(width) * es);
}

void sum_head_columns(int64_t rows, const float* src, int64_t ld_src, int64_t src_stride, int64_t src_col, float* dst,
                      int64_t width, int64_t heads) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < rows; ++n)
    for (int64_t h = 0; h < heads; ++h) {
      const float* s = src + n * ld_src + h * src_stride + src_col;
      float* d = dst + n * width;
      for (int64_t j = 0; j < width; ++j) d[j] += s[j];
    }
}

}  // namespace tessel::kernels
