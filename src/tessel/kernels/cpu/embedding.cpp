#include "tessel/kernels/embedding.h"

#include <omp.h>

#include <algorithm>

#include "tessel/core/check.h"

namespace tessel::kernels {

void embedding_fwd(int64_t N, int64_t D, int64_t V, const int64_t* tok, const float* W, const float* pos, int64_t T,
                   float* out) {
  for (int64_t n = 0; n < N; ++n)
    TESSEL_CHECK(tok[n] >= 0 && tok[n] < V, "token id {} at position {} is outside the vocabulary [0, {})", tok[n], n,
                 V);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* w = W + tok[n] * D;
    float* o = out + n * D;
    if (pos) {
      const float* p = pos + (n % T) * D;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) o[j] = w[j] + p[j];
    } else {
      std::copy_n(w, D, o);
    }
  }
}

void embedding_bwd(int64_t N, int64_t D, const int64_t* tok, const float* dout, float* dW, float* dpos, int64_t T) {
  // Threads own disjoint column ranges, so repeated tokens never race.
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t chunk = (D + nt - 1) / nt;
    const int64_t c0 = std::min<int64_t>(D, id * chunk), c1 = std::min<int64_t>(D, c0 + chunk);
    for (int64_t n = 0; n < N; ++n) {
      const float* g = dout + n * D;
      float* w = dW + tok[n] * D;
#pragma omp simd
      for (int64_t j = c0; j < c1; ++j) w[j] += g[j];
      if (dpos) {
        float* p = dpos + (n % T) * D;
#pragma omp simd
        for (int64_t j = c0; j < c1; ++j) p[j] += g[j];
      }
    }
  }
}

void embedding_fwd_slice(int64_t N, int64_t D, int64_t Vl, const int64_t* tok, const float* W, int64_t vocab_begin,
                         float* out) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const int64_t local = tok[n] - vocab_begin;
    if (local >= 0 && local < Vl)
      std::copy_n(W + local * D, D, out + n * D);
    else
      std::fill_n(out + n * D, D, 0.0f);
  }
}

void embedding_bwd_slice(int64_t N, int64_t D, int64_t Vl, const int64_t* tok, const float* dout, int64_t vocab_begin,
                         float* dW) {
  // In row order on one thread: repeated tokens accumulate in the same order on every run.
  for (int64_t n = 0; n < N; ++n) {
    const int64_t local = tok[n] - vocab_begin;
    if (local < 0 || local >= Vl) continue;
    float* w = dW + local * D;
    const float* g = dout + n * D;
    for (int64_t j = 0; j < D; ++j) w[j] += g[j];
  }
}

void add_gathered_rows(int64_t N, int64_t D, const int64_t* index, const float* table, float* out) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* p = table + index[n] * D;
    float* o = out + n * D;
#pragma omp simd
    for (int64_t j = 0; j < D; ++j) o[j] += p[j];
  }
}

}  // namespace tessel::kernels
