#include "tessel/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "tessel/core/check.h"
#include "tessel/kernels/cpu/elementwise.h"
#include "tessel/kernels/cpu/isa.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace tessel::kernels {
namespace {

constexpr int64_t kTile = 64;  // query and key tile length

// Number of keys of tile [kstart, kstart + kn) that query position qpos may attend to.
inline int64_t visible_keys(bool causal, int64_t qpos, int64_t kstart, int64_t kn) {
  if (!causal) return kn;
  return std::clamp<int64_t>(qpos - kstart + 1, 0, kn);
}

#if defined(__AVX512F__)
// Register-blocked S = A Bt over all kTile columns (columns >= n hold junk the callers never read):
// two rows at a time, 8 accumulators, so each loaded Bt vector feeds two FMAs.
inline void tile_abt_avx512(int64_t m, int64_t Dh, const float* A, int64_t lda, const float* Bt, float* S) {
  int64_t i = 0;
  for (; i + 2 <= m; i += 2) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    const float* r0 = A + i * lda;
    const float* r1 = r0 + lda;
    for (int64_t d = 0; d < Dh; ++d) {
      const float* bt = Bt + d * kTile;
      const __m512 v0 = _mm512_loadu_ps(bt), v1 = _mm512_loadu_ps(bt + 16), v2 = _mm512_loadu_ps(bt + 32),
                   v3 = _mm512_loadu_ps(bt + 48);
      const __m512 x = _mm512_set1_ps(r0[d]), y = _mm512_set1_ps(r1[d]);
      a0 = _mm512_fmadd_ps(x, v0, a0);
      a1 = _mm512_fmadd_ps(x, v1, a1);
      a2 = _mm512_fmadd_ps(x, v2, a2);
      a3 = _mm512_fmadd_ps(x, v3, a3);
      b0 = _mm512_fmadd_ps(y, v0, b0);
      b1 = _mm512_fmadd_ps(y, v1, b1);
      b2 = _mm512_fmadd_ps(y, v2, b2);
      b3 = _mm512_fmadd_ps(y, v3, b3);
    }
    float* s0 = S + i * kTile;
    float* s1 = s0 + kTile;
    _mm512_storeu_ps(s0, a0);
    _mm512_storeu_ps(s0 + 16, a1);
    _mm512_storeu_ps(s0 + 32, a2);
    _mm512_storeu_ps(s0 + 48, a3);
    _mm512_storeu_ps(s1, b0);
    _mm512_storeu_ps(s1 + 16, b1);
    _mm512_storeu_ps(s1 + 32, b2);
    _mm512_storeu_ps(s1 + 48, b3);
  }
  for (; i < m; ++i) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t d = 0; d < Dh; ++d) {
      const float* bt = Bt + d * kTile;
      const __m512 x = _mm512_set1_ps(A[i * lda + d]);
      a0 = _mm512_fmadd_ps(x, _mm512_loadu_ps(bt), a0);
      a1 = _mm512_fmadd_ps(x, _mm512_loadu_ps(bt + 16), a1);
      a2 = _mm512_fmadd_ps(x, _mm512_loadu_ps(bt + 32), a2);
      a3 = _mm512_fmadd_ps(x, _mm512_loadu_ps(bt + 48), a3);
    }
    float* s0 = S + i * kTile;
    _mm512_storeu_ps(s0, a0);
    _mm512_storeu_ps(s0 + 16, a1);
    _mm512_storeu_ps(s0 + 32, a2);
    _mm512_storeu_ps(s0 + 48, a3);
  }
}

// out[0, 16 NV) += sum_j w[j * wstride] * X[j * ldx + (0, 16 NV)] for j < n, accumulators in registers.
template <int NV>
inline void row_axpy_sum(int64_t n, const float* w, int64_t wstride, const float* X, int64_t ldx, float scale,
                         float* out) {
  __m512 acc[NV];
  for (int v = 0; v < NV; ++v) acc[v] = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    const __m512 s = _mm512_set1_ps(w[j * wstride]);
    const float* x = X + j * ldx;
    for (int v = 0; v < NV; ++v) acc[v] = _mm512_fmadd_ps(s, _mm512_loadu_ps(x + 16 * v), acc[v]);
  }
  const __m512 sc = _mm512_set1_ps(scale);
  for (int v = 0; v < NV; ++v) _mm512_storeu_ps(out + 16 * v, _mm512_fmadd_ps(sc, acc[v], _mm512_loadu_ps(out + 16 * v)));
}

// The same for two output rows at once: each loaded X vector feeds two FMAs.
template <int NV>
inline void row2_axpy_sum(int64_t n, const float* w0, const float* w1, int64_t wstride, const float* X, int64_t ldx,
                          float scale, float* out0, float* out1) {
  __m512 a[NV], b[NV];
  for (int v = 0; v < NV; ++v) a[v] = b[v] = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    const __m512 s0 = _mm512_set1_ps(w0[j * wstride]), s1 = _mm512_set1_ps(w1[j * wstride]);
    const float* x = X + j * ldx;
    for (int v = 0; v < NV; ++v) {
      const __m512 xv = _mm512_loadu_ps(x + 16 * v);
      a[v] = _mm512_fmadd_ps(s0, xv, a[v]);
      b[v] = _mm512_fmadd_ps(s1, xv, b[v]);
    }
  }
  const __m512 sc = _mm512_set1_ps(scale);
  for (int v = 0; v < NV; ++v) {
    _mm512_storeu_ps(out0 + 16 * v, _mm512_fmadd_ps(sc, a[v], _mm512_loadu_ps(out0 + 16 * v)));
    _mm512_storeu_ps(out1 + 16 * v, _mm512_fmadd_ps(sc, b[v], _mm512_loadu_ps(out1 + 16 * v)));
  }
}

// Head sizes the register-blocked products take: a multiple of 16 floats (one zmm each) up to 192,
// DeepSeek-V3's query/key head (128 + 64 rotary; MLA's heads are rarely a power of two). Two rows
// of 12 vectors hold 24 accumulators, within the 32 zmm registers.
constexpr int64_t kMaxBlockedVectors = 12;
inline bool register_blocked(int64_t Dh) { return Dh % 16 == 0 && Dh > 0 && Dh / 16 <= kMaxBlockedVectors; }

// f.template operator()<nv>() for a run-time nv in [1, kMaxBlockedVectors].
template <class F, int NV = 1>
inline void with_vectors(int64_t nv, F&& f) {
  if constexpr (NV <= kMaxBlockedVectors) {
    if (nv == NV) return f.template operator()<NV>();
    return with_vectors<F, NV + 1>(nv, std::forward<F>(f));
  }
}
#endif

// out[d] += scale * sum_j w[j * wstride] * X[j * ldx + d] for d < Dh: the P V, dS K, P^T dO and
// dS^T Q products of a tile, one output row at a time.
inline void row_axpy_sum_any(int64_t n, int64_t Dh, const float* w, int64_t wstride, const float* X, int64_t ldx,
                             float scale, float* out) {
#if defined(__AVX512F__)
  if (cpu::avx512_paths_enabled() && register_blocked(Dh))
    return with_vectors(Dh / 16, [&]<int NV>() { row_axpy_sum<NV>(n, w, wstride, X, ldx, scale, out); });
#endif
  for (int64_t j = 0; j < n; ++j) {
    const float s = scale * w[j * wstride];
    const float* x = X + j * ldx;
#pragma omp simd
    for (int64_t d = 0; d < Dh; ++d) out[d] += s * x[d];
  }
}

// out_r[d] += scale * sum_j w_r[j * wstride] * X[j * ldx + d] for rows r = 0, 1 sharing X.
inline void row2_axpy_sum_any(int64_t n, int64_t Dh, const float* w0, const float* w1, int64_t wstride,
                              const float* X, int64_t ldx, float scale, float* out0, float* out1) {
#if defined(__AVX512F__)
  if (cpu::avx512_paths_enabled() && register_blocked(Dh))
    return with_vectors(Dh / 16, [&]<int NV>() { row2_axpy_sum<NV>(n, w0, w1, wstride, X, ldx, scale, out0, out1); });
#endif
  row_axpy_sum_any(n, Dh, w0, wstride, X, ldx, scale, out0);
  row_axpy_sum_any(n, Dh, w1, wstride, X, ldx, scale, out1);
}

// Applies f(i0, i1) to row pairs of [0, n) and f(i, -1) to a last odd row.
template <class F>
inline void for_row_pairs(int64_t n, F&& f) {
  int64_t i = 0;
  for (; i + 2 <= n; i += 2) f(i, i + 1);
  if (i < n) f(i, int64_t(-1));
}

// S[i][j] = sum_d A[i][d] * Bt[d][j] for i < m, j < n (A rows strided by lda, Bt is [Dh][kTile]).
inline void tile_abt(int64_t m, int64_t n, int64_t Dh, const float* A, int64_t lda, const float* Bt, float* S) {
#if defined(__AVX512F__)
  if (n > 48 && cpu::avx512_paths_enabled()) return tile_abt_avx512(m, Dh, A, lda, Bt, S);
#endif
  for (int64_t i = 0; i < m; ++i) {
    float* si = S + i * kTile;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) si[j] = 0.0f;
    for (int64_t d = 0; d < Dh; ++d) {
      const float a = A[i * lda + d];
      const float* b = Bt + d * kTile;
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) si[j] += a * b[j];
    }
  }
}

// Gathers a [n, Dh] tile of rows (stride ld) into column-major Bt[d][j].
inline void load_transposed(int64_t n, int64_t Dh, const float* src, int64_t ld, float* Bt) {
  for (int64_t j = 0; j < n; ++j)
    for (int64_t d = 0; d < Dh; ++d) Bt[d * kTile + j] = src[j * ld + d];
}

}  // namespace

template <class To>
void attention_fwd(const AttentionShape& s, const float* q, int64_t ldq, const float* k, int64_t ldk, const float* v,
                   int64_t ldv, To* out, int64_t ldo, float* lse) {
  TESSEL_CHECK(s.H % s.G == 0, "attention: {} query heads not divisible into {} groups", s.H, s.G);
  const int64_t Dh = s.Dh, Dv = s.dv(), T = s.T, rep = s.H / s.G;
#pragma omp parallel
  {
    std::vector<float> Qs(size_t(kTile * Dh)), Kt(size_t(Dh * kTile)), S(size_t(kTile * kTile)),
        acc(size_t(kTile * Dv)), m(kTile), l(kTile);
#pragma omp for collapse(2) schedule(dynamic)
    for (int64_t bh = 0; bh < s.B * s.H; ++bh)
      for (int64_t qstart = 0; qstart < T; qstart += kTile) {
        const int64_t b = bh / s.H, h = bh % s.H, g = h / rep;
        const int64_t qn = std::min(kTile, T - qstart);
        const float* qb = q + (b * T + qstart) * ldq + h * Dh;
        const float* kb = k + b * T * ldk + g * Dh;
        const float* vb = v + b * T * ldv + g * Dv;
        for (int64_t i = 0; i < qn; ++i) {
#pragma omp simd
          for (int64_t d = 0; d < Dh; ++d) Qs[size_t(i * Dh + d)] = qb[i * ldq + d] * s.scale;
          m[size_t(i)] = -std::numeric_limits<float>::infinity();
          l[size_t(i)] = 0.0f;
          std::fill_n(acc.data() + i * Dv, Dv, 0.0f);
        }
        const int64_t kend = s.causal ? qstart + qn : T;
        for (int64_t kstart = 0; kstart < kend; kstart += kTile) {
          const int64_t kn = std::min(kTile, kend - kstart);
          load_transposed(kn, Dh, kb + kstart * ldk, ldk, Kt.data());
          tile_abt(qn, kn, Dh, Qs.data(), Dh, Kt.data(), S.data());
          int64_t jmax = 0;  // P V below runs over the widest visible prefix; masked P entries are 0
          for (int64_t i = 0; i < qn; ++i) {
            const int64_t jn = visible_keys(s.causal, qstart + i, kstart, kn);
            float* si = S.data() + i * kTile;
            for (int64_t j = jn; j < kn; ++j) si[j] = 0.0f;
            jmax = std::max(jmax, jn);
            if (jn == 0) continue;
            float mx = m[size_t(i)];
#pragma omp simd reduction(max : mx)
            for (int64_t j = 0; j < jn; ++j) mx = std::max(mx, si[j]);
            const float alpha = fast_exp(m[size_t(i)] - mx);
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int64_t j = 0; j < jn; ++j) {
              si[j] = fast_exp(si[j] - mx);
              sum += si[j];
            }
            l[size_t(i)] = l[size_t(i)] * alpha + sum;
            m[size_t(i)] = mx;
            float* ai = acc.data() + i * Dv;
#pragma omp simd
            for (int64_t d = 0; d < Dv; ++d) ai[d] *= alpha;
          }
          for_row_pairs(qn, [&](int64_t i0, int64_t i1) {
            const float* x = vb + kstart * ldv;
            if (i1 < 0)
              row_axpy_sum_any(jmax, Dv, S.data() + i0 * kTile, 1, x, ldv, 1.0f, acc.data() + i0 * Dv);
            else
              row2_axpy_sum_any(jmax, Dv, S.data() + i0 * kTile, S.data() + i1 * kTile, 1, x, ldv, 1.0f,
                                acc.data() + i0 * Dv, acc.data() + i1 * Dv);
          });
        }
        for (int64_t i = 0; i < qn; ++i) {
          const float inv = 1.0f / l[size_t(i)];
          To* oi = out + (b * T + qstart + i) * ldo + h * Dv;
          const float* ai = acc.data() + i * Dv;
#pragma omp simd
          for (int64_t d = 0; d < Dv; ++d) store_as(oi + d, ai[d] * inv);
          lse[(b * s.H + h) * T + qstart + i] = m[size_t(i)] + std::log(l[size_t(i)]);
        }
      }
  }
}

template <class To>
void attention_bwd(const AttentionShape& s, const float* q, int64_t ldq, const float* k, int64_t ldk, const float* v,
                   int64_t ldv, const To* out, int64_t ldo, const float* dout, int64_t lddo, const float* lse,
                   float* dq, int64_t lddq, float* dk, int64_t lddk, float* dv, int64_t lddv) {
  TESSEL_CHECK(s.H % s.G == 0, "attention: {} query heads not divisible into {} groups", s.H, s.G);
  const int64_t Dh = s.Dh, Dv = s.dv(), T = s.T, rep = s.H / s.G;
#pragma omp parallel
  {
    std::vector<float> Qs(size_t(kTile * Dh)), Kt(size_t(Dh * kTile)), Vt(size_t(Dv * kTile)),
        P(size_t(kTile * kTile)), dP(size_t(kTile * kTile)), dKacc(size_t(kTile * Dh)), dVacc(size_t(kTile * Dv)),
        Drow(size_t(rep * T));
#pragma omp for collapse(2) schedule(dynamic)
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t g = 0; g < s.G; ++g) {
        // D[h][t] = sum_d dO * O (the softmax-backward row term), and zeroed dq rows of this group.
        for (int64_t r = 0; r < rep; ++r) {
          const int64_t h = g * rep + r;
          for (int64_t t = 0; t < T; ++t) {
            const To* o = out + (b * T + t) * ldo + h * Dv;
            const float* d_o = dout + (b * T + t) * lddo + h * Dv;
            float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
            for (int64_t d = 0; d < Dv; ++d) acc += to_f32(o[d]) * d_o[d];
            Drow[size_t(r * T + t)] = acc;
            std::fill_n(dq + (b * T + t) * lddq + h * Dh, Dh, 0.0f);
          }
        }
        const float* kb = k + b * T * ldk + g * Dh;
        const float* vb = v + b * T * ldv + g * Dv;
        for (int64_t kstart = 0; kstart < T; kstart += kTile) {
          const int64_t kn = std::min(kTile, T - kstart);
          load_transposed(kn, Dh, kb + kstart * ldk, ldk, Kt.data());
          load_transposed(kn, Dv, vb + kstart * ldv, ldv, Vt.data());
          std::fill(dKacc.begin(), dKacc.end(), 0.0f);
          std::fill(dVacc.begin(), dVacc.end(), 0.0f);
          for (int64_t r = 0; r < rep; ++r) {
            const int64_t h = g * rep + r;
            const int64_t qfirst = s.causal ? kstart / kTile * kTile : 0;
            for (int64_t qstart = qfirst; qstart < T; qstart += kTile) {
              const int64_t qn = std::min(kTile, T - qstart);
              const float* qb = q + (b * T + qstart) * ldq + h * Dh;
              const float* dob = dout + (b * T + qstart) * lddo + h * Dv;
              const float* lrow = lse + (b * s.H + h) * T + qstart;
              for (int64_t i = 0; i < qn; ++i)
#pragma omp simd
                for (int64_t d = 0; d < Dh; ++d) Qs[size_t(i * Dh + d)] = qb[i * ldq + d] * s.scale;
              tile_abt(qn, kn, Dh, Qs.data(), Dh, Kt.data(), P.data());  // scores
              tile_abt(qn, kn, Dv, dob, lddo, Vt.data(), dP.data());    // dP = dO V^T
              for (int64_t i = 0; i < qn; ++i) {
                const int64_t jn = visible_keys(s.causal, qstart + i, kstart, kn);
                float* pi = P.data() + i * kTile;
                float* dpi = dP.data() + i * kTile;
                const float Di = Drow[size_t(r * T + qstart + i)];
                const float li = lrow[i];
#pragma omp simd
                for (int64_t j = 0; j < kn; ++j) {
                  const float p = j < jn ? fast_exp(pi[j] - li) : 0.0f;
                  pi[j] = p;
                  dpi[j] = p * (dpi[j] - Di);  // dS
                }
              }
              // Masked P and dS entries are 0, so every product runs over the whole tile.
              // dQ[i] += scale * sum_j dS[i][j] K[j]
              float* dqb = dq + (b * T + qstart) * lddq + h * Dh;
              for_row_pairs(qn, [&](int64_t i0, int64_t i1) {
                const float* x = kb + kstart * ldk;
                if (i1 < 0)
                  row_axpy_sum_any(kn, Dh, dP.data() + i0 * kTile, 1, x, ldk, s.scale, dqb + i0 * lddq);
                else
                  row2_axpy_sum_any(kn, Dh, dP.data() + i0 * kTile, dP.data() + i1 * kTile, 1, x, ldk, s.scale,
                                    dqb + i0 * lddq, dqb + i1 * lddq);
              });
              // dV[j] += sum_i P[i][j] dO[i];  dK[j] += scale * sum_i dS[i][j] Q[i]
              for_row_pairs(kn, [&](int64_t j0, int64_t j1) {
                if (j1 < 0) {
                  row_axpy_sum_any(qn, Dv, P.data() + j0, kTile, dob, lddo, 1.0f, dVacc.data() + j0 * Dv);
                  row_axpy_sum_any(qn, Dh, dP.data() + j0, kTile, qb, ldq, s.scale, dKacc.data() + j0 * Dh);
                } else {
                  row2_axpy_sum_any(qn, Dv, P.data() + j0, P.data() + j1, kTile, dob, lddo, 1.0f,
                                    dVacc.data() + j0 * Dv, dVacc.data() + j1 * Dv);
                  row2_axpy_sum_any(qn, Dh, dP.data() + j0, dP.data() + j1, kTile, qb, ldq, s.scale,
                                    dKacc.data() + j0 * Dh, dKacc.data() + j1 * Dh);
                }
              });
            }
          }
          for (int64_t j = 0; j < kn; ++j) {
            std::copy_n(dKacc.data() + j * Dh, Dh, dk + (b * T + kstart + j) * lddk + g * Dh);
            std::copy_n(dVacc.data() + j * Dv, Dv, dv + (b * T + kstart + j) * lddv + g * Dv);
          }
        }
      }
  }
}

template void attention_fwd<float>(const AttentionShape&, const float*, int64_t, const float*, int64_t, const float*,
                                   int64_t, float*, int64_t, float*);
template void attention_fwd<bf16>(const AttentionShape&, const float*, int64_t, const float*, int64_t, const float*,
                                  int64_t, bf16*, int64_t, float*);
template void attention_bwd<float>(const AttentionShape&, const float*, int64_t, const float*, int64_t, const float*,
                                   int64_t, const float*, int64_t, const float*, int64_t, const float*, float*,
                                   int64_t, float*, int64_t, float*, int64_t);
template void attention_bwd<bf16>(const AttentionShape&, const float*, int64_t, const float*, int64_t, const float*,
                                  int64_t, const bf16*, int64_t, const float*, int64_t, const float*, float*, int64_t,
                                  float*, int64_t, float*, int64_t);

}  // namespace tessel::kernels
