#include "tessel/kernels/cast.h"

#include <omp.h>

#include <vector>

#include "tessel/kernels/cpu/elementwise.h"

namespace tessel::kernels {

void cast_f32_to_bf16(int64_t n, const float* src, bf16* dst) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) store_as(dst + i, src[i]);
}

void cast_bf16_to_f32(int64_t n, const bf16* src, float* dst) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) dst[i] = to_f32(src[i]);
}

void add(int64_t n, const float* a, const float* b, float* out) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void add_row_vector(int64_t N, int64_t D, const float* v, float* y) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i)
#pragma omp simd
    for (int64_t j = 0; j < D; ++j) y[i * D + j] += v[j];
}

template <class T>
void column_sum_accumulate(int64_t N, int64_t D, const T* x, float* out) {
  const int nt = omp_get_max_threads();
  std::vector<float> part(size_t(nt) * size_t(D), 0.0f);
#pragma omp parallel
  {
    float* my = part.data() + size_t(omp_get_thread_num()) * size_t(D);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < N; ++i)
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) my[j] += to_f32(x[i * D + j]);
  }
  for (int t = 0; t < nt; ++t)
    for (int64_t j = 0; j < D; ++j) out[j] += part[size_t(t) * size_t(D) + size_t(j)];
}

template void column_sum_accumulate<float>(int64_t, int64_t, const float*, float*);
template void column_sum_accumulate<bf16>(int64_t, int64_t, const bf16*, float*);

}  // namespace tessel::kernels
