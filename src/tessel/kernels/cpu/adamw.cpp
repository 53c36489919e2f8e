#include "tessel/kernels/adamw.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tessel/kernels/cpu/elementwise.h"

namespace tessel::kernels {

namespace {
// Blocks of kBlock elements: the fp32 update of a block in one vectorised loop, then its bf16 copy
// in a second one over the same (cache-hot) block. One loop doing both is left scalar by GCC (the
// 16-bit stores beside the 32-bit lanes), which made the bf16 runs' optimizer step twice the fp32
// runs'. Each element's arithmetic is the same however the blocks fall to threads.
constexpr int64_t kBlock = 2048;

template <bool kCopy>
void adamw_loop(int64_t n, float* p, const float* g, float* m, float* v, const AdamWHyper& h, float grad_scale,
                bf16* copy) {
  const float bc1 = 1.0f - float(std::pow(double(h.beta1), double(h.step)));
  const float bc2 = 1.0f - float(std::pow(double(h.beta2), double(h.step)));
  const float step_size = h.lr / bc1, inv_sqrt_bc2 = 1.0f / std::sqrt(bc2), decay = 1.0f - h.lr * h.weight_decay;
  const float b1 = h.beta1, b2 = h.beta2, eps = h.eps;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kBlock, end = std::min(n, begin + kBlock);
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) {
      const float gi = g[i] * grad_scale;
      const float mi = b1 * m[i] + (1.0f - b1) * gi;
      const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
      m[i] = mi;
      v[i] = vi;
      p[i] = p[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
    }
    if constexpr (kCopy) {
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) store_as(copy + i, p[i]);
    }
  }
}
}  // namespace

void adamw_update(int64_t n, float* p, const float* g, float* m, float* v, const AdamWHyper& h, float grad_scale,
                  bf16* compute_copy) {
  if (compute_copy)
    adamw_loop<true>(n, p, g, m, v, h, grad_scale, compute_copy);
  else
    adamw_loop<false>(n, p, g, m, v, h, grad_scale, nullptr);
}

double sum_squares(int64_t n, const float* x) {
  // Fixed blocks summed in block order: the result does not depend on thread timing (an OpenMP
  // reduction may combine partials in any order), so resumed runs reproduce grad norms bit for bit.
  constexpr int64_t kBlock = 1 << 16;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(size_t(blocks), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t e = std::min(n, (b + 1) * kBlock);
    // Squares in double: an fp32 square overflows above 1.8e19, and exploding gradients must still
    // give a finite norm for clipping.
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = b * kBlock; i < e; ++i) s += double(x[i]) * double(x[i]);
    partial[size_t(b)] = s;
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}


}  // namespace tessel::kernels
