#include "tessel/kernels/embedding.h"

#include <omp.h>

#include <algorithm>

#include "tessel/core/check.h"

namespace tessel::kernels {

namespace {

// Row n of `out` = float(W[tok[n]]) (+ pos[n % T]): W is the f32 table or its bf16 copy.
template <class Table>
void lookup_rows(int64_t N, int64_t D, const int64_t* tok, const Table* W, const float* pos, int64_t T, float* out) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const Table* w = W + tok[n] * D;
    float* o = out + n * D;
    if (pos) {
      const float* p = pos + (n % T) * D;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) o[j] = float(w[j]) + p[j];
    } else {
      for (int64_t j = 0; j < D; ++j) o[j] = float(w[j]);
    }
  }
}

void check_tokens(int64_t N, int64_t V, const int64_t* tok) {
  for (int64_t n = 0; n < N; ++n)
    TESSEL_CHECK(tok[n] >= 0 && tok[n] < V, "token id {} at position {} is outside the vocabulary [0, {})", tok[n], n,
                 V);
}

// Rows of the vocabulary slice [vocab_begin, vocab_begin + Vl) copied (converted to f32), others zero.
template <class Table>
void lookup_slice_rows(int64_t N, int64_t D, int64_t Vl, const int64_t* tok, const Table* W, int64_t vocab_begin,
                       float* out) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const int64_t local = tok[n] - vocab_begin;
    float* o = out + n * D;
    if (local >= 0 && local < Vl) {
      const Table* w = W + local * D;
      for (int64_t j = 0; j < D; ++j) o[j] = float(w[j]);
    } else {
      std::fill_n(o, D, 0.0f);
    }
  }
}

}  // namespace

void embedding_fwd(int64_t N, int64_t D, int64_t V, const int64_t* tok, const float* W, const float* pos, int64_t T,
                   float* out) {
  check_tokens(N, V, tok);
  lookup_rows(N, D, tok, W, pos, T, out);
}

void embedding_fwd(int64_t N, int64_t D, int64_t V, const int64_t* tok, const bf16* W, const float* pos, int64_t T,
                   float* out) {
  check_tokens(N, V, tok);
  lookup_rows(N, D, tok, W, pos, T, out);
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
  lookup_slice_rows(N, D, Vl, tok, W, vocab_begin, out);
}

void embedding_fwd_slice(int64_t N, int64_t D, int64_t Vl, const int64_t* tok, const bf16* W, int64_t vocab_begin,
                         float* out) {
  lookup_slice_rows(N, D, Vl, tok, W, vocab_begin, out);
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
