#include "tessel/core/rng.h"

#include <cmath>

namespace tessel {

Philox4 philox4x32_10(Philox4 ctr, std::array<uint32_t, 2> key) {
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;  // round multipliers
  constexpr uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;  // Weyl key increments
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(M0) * ctr[0];
    const uint64_t p1 = uint64_t(M1) * ctr[2];
    ctr = {uint32_t(p1 >> 32) ^ ctr[1] ^ key[0], uint32_t(p1), uint32_t(p0 >> 32) ^ ctr[3] ^ key[1], uint32_t(p0)};
    key[0] += W0;
    key[1] += W1;
  }
  return ctr;
}

uint64_t stream_id(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : name) {
    h ^= uint8_t(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

static Philox4 draw(uint64_t seed, uint64_t stream, uint64_t index) {
  return philox4x32_10({uint32_t(index), uint32_t(index >> 32), uint32_t(stream), uint32_t(stream >> 32)},
                       {uint32_t(seed), uint32_t(seed >> 32)});
}

// 24 random bits centred in their bucket: never exactly 0 or 1.
static double to_open_unit(uint32_t u) { return (double(u >> 8) + 0.5) * (1.0 / 16777216.0); }

float philox_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return float(to_open_unit(draw(seed, stream, index)[0]));
}

float philox_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  const Philox4 r = draw(seed, stream, index);
  // Box-Muller on two 32-bit uniforms; double precision keeps it exact enough to be layout-independent.
  const double u1 = (double(r[0]) + 0.5) * (1.0 / 4294967296.0);
  const double u2 = (double(r[1]) + 0.5) * (1.0 / 4294967296.0);
  return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

void fill_normal_slice(uint64_t seed, uint64_t stream, int64_t global_cols, int64_t row_begin, int64_t rows,
                       int64_t col_begin, int64_t cols, float mean, float std, float* out) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const uint64_t gi = uint64_t((row_begin + r) * global_cols + col_begin + c);
      out[r * cols + c] = mean + std * philox_normal(seed, stream, gi);
    }
}

}  // namespace tessel
