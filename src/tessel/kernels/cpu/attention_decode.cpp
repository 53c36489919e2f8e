// Decode-step attention on the cpu (kernels/attention.h, attention_decode): one query row and head at
// a time against the cached keys and values, with an exact softmax.
#include <algorithm>
#include <cmath>
#include <vector>

#include "tessel/kernels/attention.h"

namespace tessel::kernels {

void attention_decode_rows(int64_t n, int64_t H, int64_t G, int64_t Dh, int64_t pos0, float scale, const float* q,
                           int64_t ldq, const float* K, const float* V, float* out) {
  const int64_t kv = G * Dh, rep = H / G;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t len = pos0 + i + 1, g = h / rep;
      const float* qi = q + i * ldq + h * Dh;
      std::vector<float> p(static_cast<size_t>(len));
      float mx = -1e30f;
      for (int64_t j = 0; j < len; ++j) {
        float dot = 0;
        for (int64_t d = 0; d < Dh; ++d) dot += qi[d] * K[j * kv + g * Dh + d];
        p[size_t(j)] = dot * scale;
        mx = std::max(mx, p[size_t(j)]);
      }
      float sum = 0;
      for (auto& x : p) sum += (x = std::exp(x - mx));
      float* oi = out + i * H * Dh + h * Dh;
      std::fill_n(oi, Dh, 0.0f);
      for (int64_t j = 0; j < len; ++j)
        for (int64_t d = 0; d < Dh; ++d) oi[d] += p[size_t(j)] / sum * V[j * kv + g * Dh + d];
    }
}

}  // namespace tessel::kernels
