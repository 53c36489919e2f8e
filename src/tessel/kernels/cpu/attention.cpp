#include "tessel/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tessel/core/check.h"
#include "tessel/kernels/cpu/elementwise.h"

namespace tessel::kernels {
namespace {

constexpr int64_t kTile = 64;  // query and key tile length

// Number of keys of tile [kstart, kstart + kn) that query position qpos may attend to.
inline int64_t visible_keys(bool causal, int64_t qpos, int64_t kstart, int64_t kn) {
  if (!causal) return kn;
  return std::clamp<int64_t>(qpos - kstart + 1, 0, kn);
}

// S[i][j] = sum_d A[i][d] * Bt[d][j] for i < m, j < n (A rows strided by lda, Bt is [Dh][kTile]).
inline void tile_abt(int64_t m, int64_t n, int64_t Dh, const float* A, int64_t lda, const float* Bt, float* S) {
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
  const int64_t Dh = s.Dh, T = s.T, rep = s.H / s.G;
#pragma omp parallel
  {
    std::vector<float> Qs(size_t(kTile * Dh)), Kt(size_t(Dh * kTile)), S(size_t(kTile * kTile)),
        acc(size_t(kTile * Dh)), m(kTile), l(kTile);
#pragma omp for collapse(2) schedule(dynamic)
    for (int64_t bh = 0; bh < s.B * s.H; ++bh)
      for (int64_t qstart = 0; qstart < T; qstart += kTile) {
        const int64_t b = bh / s.H, h = bh % s.H, g = h / rep;
        const int64_t qn = std::min(kTile, T - qstart);
        const float* qb = q + (b * T + qstart) * ldq + h * Dh;
        const float* kb = k + b * T * ldk + g * Dh;
        const float* vb = v + b * T * ldv + g * Dh;
        for (int64_t i = 0; i < qn; ++i) {
#pragma omp simd
          for (int64_t d = 0; d < Dh; ++d) Qs[size_t(i * Dh + d)] = qb[i * ldq + d] * s.scale;
          m[size_t(i)] = -std::numeric_limits<float>::infinity();
          l[size_t(i)] = 0.0f;
          std::fill_n(acc.data() + i * Dh, Dh, 0.0f);
        }
        const int64_t kend = s.causal ? qstart + qn : T;
        for (int64_t kstart = 0; kstart < kend; kstart += kTile) {
          const int64_t kn = std::min(kTile, kend - kstart);
          load_transposed(kn, Dh, kb + kstart * ldk, ldk, Kt.data());
          tile_abt(qn, kn, Dh, Qs.data(), Dh, Kt.data(), S.data());
          for (int64_t i = 0; i < qn; ++i) {
            const int64_t jn = visible_keys(s.causal, qstart + i, kstart, kn);
            if (jn == 0) continue;
            float* si = S.data() + i * kTile;
            float mx = m[size_t(i)];
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
            float* ai = acc.data() + i * Dh;
#pragma omp simd
            for (int64_t d = 0; d < Dh; ++d) ai[d] *= alpha;
            for (int64_t j = 0; j < jn; ++j) {
              const float p = si[j];
              const float* vj = vb + (kstart + j) * ldv;
#pragma omp simd
              for (int64_t d = 0; d < Dh; ++d) ai[d] += p * vj[d];
            }
          }
        }
        for (int64_t i = 0; i < qn; ++i) {
          const float inv = 1.0f / l[size_t(i)];
          To* oi = out + (b * T + qstart + i) * ldo + h * Dh;
          const float* ai = acc.data() + i * Dh;
#pragma omp simd
          for (int64_t d = 0; d < Dh; ++d) store_as(oi + d, ai[d] * inv);
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
  const int64_t Dh = s.Dh, T = s.T, rep = s.H / s.G;
#pragma omp parallel
  {
    std::vector<float> Qs(size_t(kTile * Dh)), Kt(size_t(Dh * kTile)), Vt(size_t(Dh * kTile)),
        P(size_t(kTile * kTile)), dP(size_t(kTile * kTile)), dKacc(size_t(kTile * Dh)), dVacc(size_t(kTile * Dh)),
        Drow(size_t(rep * T));
#pragma omp for collapse(2) schedule(dynamic)
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t g = 0; g < s.G; ++g) {
        // D[h][t] = sum_d dO * O (the softmax-backward row term), and zeroed dq rows of this group.
        for (int64_t r = 0; r < rep; ++r) {
          const int64_t h = g * rep + r;
          for (int64_t t = 0; t < T; ++t) {
            const To* o = out + (b * T + t) * ldo + h * Dh;
            const float* d_o = dout + (b * T + t) * lddo + h * Dh;
            float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
            for (int64_t d = 0; d < Dh; ++d) acc += to_f32(o[d]) * d_o[d];
            Drow[size_t(r * T + t)] = acc;
            std::fill_n(dq + (b * T + t) * lddq + h * Dh, Dh, 0.0f);
          }
        }
        const float* kb = k + b * T * ldk + g * Dh;
        const float* vb = v + b * T * ldv + g * Dh;
        for (int64_t kstart = 0; kstart < T; kstart += kTile) {
          const int64_t kn = std::min(kTile, T - kstart);
          load_transposed(kn, Dh, kb + kstart * ldk, ldk, Kt.data());
          load_transposed(kn, Dh, vb + kstart * ldv, ldv, Vt.data());
          std::fill(dKacc.begin(), dKacc.end(), 0.0f);
          std::fill(dVacc.begin(), dVacc.end(), 0.0f);
          for (int64_t r = 0; r < rep; ++r) {
            const int64_t h = g * rep + r;
            const int64_t qfirst = s.causal ? kstart / kTile * kTile : 0;
            for (int64_t qstart = qfirst; qstart < T; qstart += kTile) {
              const int64_t qn = std::min(kTile, T - qstart);
              const float* qb = q + (b * T + qstart) * ldq + h * Dh;
              const float* dob = dout + (b * T + qstart) * lddo + h * Dh;
              const float* lrow = lse + (b * s.H + h) * T + qstart;
              for (int64_t i = 0; i < qn; ++i)
#pragma omp simd
                for (int64_t d = 0; d < Dh; ++d) Qs[size_t(i * Dh + d)] = qb[i * ldq + d] * s.scale;
              tile_abt(qn, kn, Dh, Qs.data(), Dh, Kt.data(), P.data());  // scores
              tile_abt(qn, kn, Dh, dob, lddo, Vt.data(), dP.data());    // dP = dO V^T
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
                if (jn == 0) continue;
                const float* doi = dob + i * lddo;
                const float* qi = qb + i * ldq;
                float* dqi = dq + (b * T + qstart + i) * lddq + h * Dh;
                for (int64_t j = 0; j < jn; ++j) {
                  const float p = pi[j], ds = dpi[j] * s.scale;
                  float* dvj = dVacc.data() + j * Dh;
                  float* dkj = dKacc.data() + j * Dh;
                  const float* kj = kb + (kstart + j) * ldk;
#pragma omp simd
                  for (int64_t d = 0; d < Dh; ++d) {
                    dvj[d] += p * doi[d];
                    dkj[d] += ds * qi[d];
                    dqi[d] += ds * kj[d];
                  }
                }
              }
            }
          }
          for (int64_t j = 0; j < kn; ++j) {
            std::copy_n(dKacc.data() + j * Dh, Dh, dk + (b * T + kstart + j) * lddk + g * Dh);
            std::copy_n(dVacc.data() + j * Dh, Dh, dv + (b * T + kstart + j) * lddv + g * Dh);
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
