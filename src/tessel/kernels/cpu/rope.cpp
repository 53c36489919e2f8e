#include "tessel/kernels/rope.h"

#include <cmath>
#include <map>
#include <mutex>
#include <tuple>

#include "tessel/core/check.h"

namespace tessel::kernels {

RopeTable::RopeTable(int64_t T_, int64_t Dh, double base) : T(T_), half(Dh / 2) {
  TESSEL_CHECK(Dh % 2 == 0, "RoPE needs an even head dimension, got {}", Dh);
  cos.resize(size_t(T * half));
  sin.resize(size_t(T * half));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < half; ++j) {
      const double a = double(t) / std::pow(base, double(2 * j) / double(Dh));  // exact angle, rounded once
      cos[size_t(t * half + j)] = float(std::cos(a));
      sin[size_t(t * half + j)] = float(std::sin(a));
    }
}

std::shared_ptr<const RopeTable> RopeTable::shared(int64_t T, int64_t Dh, double base) {
  static std::mutex mu;
  static std::map<std::tuple<int64_t, int64_t, double>, std::shared_ptr<const RopeTable>> tables;
  const std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<const RopeTable>& t = tables[{T, Dh, base}];
  if (!t) t = std::make_shared<const RopeTable>(T, Dh, base);
  return t;
}

void rope_apply(const RopeTable& tab, int64_t rows, int64_t heads, float* x, int64_t ld, bool inverse,
                int64_t pos0, int64_t head_stride) {
  TESSEL_CHECK(pos0 < 0 || pos0 + rows <= tab.T, "RoPE: positions up to {} exceed the table's {}", pos0 + rows, tab.T);
  const int64_t half = tab.half, stride = head_stride > 0 ? head_stride : 2 * half;
  const float sgn = inverse ? -1.0f : 1.0f;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = pos0 >= 0 ? pos0 + r : r % tab.T;
    const float* c = tab.cos.data() + t * half;
    const float* s = tab.sin.data() + t * half;
    for (int64_t h = 0; h < heads; ++h) {
      float* x1 = x + r * ld + h * stride;
      float* x2 = x1 + half;
#pragma omp simd
      for (int64_t j = 0; j < half; ++j) {
        const float a = x1[j], b = x2[j], sn = sgn * s[j];
        x1[j] = a * c[j] - b * sn;
        x2[j] = b * c[j] + a * sn;
      }
    }
  }
}

}  // namespace tessel::kernels
