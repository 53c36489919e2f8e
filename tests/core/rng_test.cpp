// Philox4x32-10 against the Random123 known-answer vectors (kat_vectors, philox4x32 10 rounds), the
// FNV-1a stream ids against the published FNV test vectors, normal/uniform sample statistics, and
// sharding independence of fill_normal_slice.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tessel/core/rng.h"

namespace tessel {
namespace {

TEST(Philox, KnownAnswerVectors) {
  struct Kat {
    Philox4 ctr;
    std::array<uint32_t, 2> key;
    Philox4 out;
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
      {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
       {0xffffffffu, 0xffffffffu},
       {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
      {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
       {0xa4093822u, 0x299f31d0u},
       {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
  };
  for (const Kat& k : kats) {
    const Philox4 got = philox4x32_10(k.ctr, k.key);
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(got[size_t(i)], k.out[size_t(i)]) << std::hex << "counter " << k.ctr[0] << " word " << i;
  }
}

TEST(Philox, StreamIdIsFnv1a64) {
  // Published FNV-1a 64-bit test vectors.
  EXPECT_EQ(stream_id(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(stream_id("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(stream_id("foobar"), 0x85944171f73967e8ull);
}

TEST(Philox, NormalAndUniformStatistics) {
  const int n = 100000;
  double s = 0, s2 = 0, us = 0;
  int within1 = 0;
  float umin = 1, umax = 0;
  for (int i = 0; i < n; ++i) {
    const double x = philox_normal(1234, 7, uint64_t(i));
    ASSERT_TRUE(std::isfinite(x)) << i;
    s += x;
    s2 += x * x;
    within1 += std::fabs(x) < 1.0;
    const float u = philox_uniform(1234, 7, uint64_t(i));
    ASSERT_GT(u, 0.0f) << i;
    ASSERT_LT(u, 1.0f) << i;
    us += u;
    umin = std::min(umin, u);
    umax = std::max(umax, u);
  }
  const double mean = s / n, sd = std::sqrt(s2 / n - mean * mean);
  // Standard errors: mean 1/sqrt(n) = 0.0032, std ~0.0022, P(|x|<1) 0.0015; bars are ~5 sigma.
  EXPECT_NEAR(mean, 0.0, 0.016);
  EXPECT_NEAR(sd, 1.0, 0.011);
  EXPECT_NEAR(double(within1) / n, 0.682689, 0.0075);
  EXPECT_NEAR(us / n, 0.5, 0.0046);  // uniform: sd 0.289 / sqrt(n) = 0.0009
  EXPECT_LT(umin, 1e-3f);
  EXPECT_GT(umax, 1 - 1e-3f);
}

TEST(Philox, PureFunctionOfSeedStreamIndex) {
  EXPECT_EQ(philox_normal(5, 6, 7), philox_normal(5, 6, 7));
  EXPECT_EQ(philox_uniform(5, 6, 1ull << 40), philox_uniform(5, 6, 1ull << 40));
  // The high halves of index and stream matter.
  EXPECT_NE(philox_normal(5, 6, 7), philox_normal(5, 6, 7 + (1ull << 32)));
  EXPECT_NE(philox_normal(5, 6, 7), philox_normal(5, 6 + (1ull << 32), 7));
  EXPECT_NE(philox_normal(5, 6, 7), philox_normal(5 + (1ull << 32), 6, 7));
}

TEST(Philox, DifferentStreamsAndSeedsDiffer) {
  const uint64_t a = stream_id("layers.0.attn.wq"), b = stream_id("layers.0.attn.wk");
  ASSERT_NE(a, b);
  const int n = 1000;
  int same_stream = 0, same_seed = 0;
  double corr = 0;
  for (int i = 0; i < n; ++i) {
    const float x = philox_normal(42, a, uint64_t(i)), y = philox_normal(42, b, uint64_t(i)),
                z = philox_normal(43, a, uint64_t(i));
    same_stream += x == y;
    same_seed += x == z;
    corr += double(x) * double(y);
  }
  EXPECT_EQ(same_stream, 0);
  EXPECT_EQ(same_seed, 0);
  EXPECT_LT(std::fabs(corr / n), 0.15);  // uncorrelated (5 sigma of 1/sqrt(n))
}

TEST(Philox, FillNormalSliceIsShardingIndependent) {
  const int64_t R = 37, C = 53;
  const uint64_t seed = 99, stream = stream_id("w");
  const float mean = 0.25f, sd = 0.02f;
  std::vector<float> full(size_t(R * C));
  fill_normal_slice(seed, stream, C, 0, R, 0, C, mean, sd, full.data());
  // mean + std * N(0,1) at the global index (to an ulp: the kernel may fuse the multiply-add).
  for (int64_t i = 0; i < R * C; ++i)
    ASSERT_NEAR(full[size_t(i)], mean + double(sd) * philox_normal(seed, stream, uint64_t(i)), 1e-7) << i;
  struct Block {
    int64_t r0, rows, c0, cols;
  };
  // Row shards, column shards (tensor parallel), and an interior block with odd sizes.
  for (const Block& b : {Block{0, 19, 0, C}, Block{19, 18, 0, C}, Block{0, R, 0, 26}, Block{0, R, 26, 27},
                         Block{5, 7, 11, 13}, Block{36, 1, 52, 1}}) {
    std::vector<float> part(size_t(b.rows * b.cols), -1.0f);
    fill_normal_slice(seed, stream, C, b.r0, b.rows, b.c0, b.cols, mean, sd, part.data());
    for (int64_t r = 0; r < b.rows; ++r)
      for (int64_t c = 0; c < b.cols; ++c)
        ASSERT_EQ(part[size_t(r * b.cols + c)], full[size_t((b.r0 + r) * C + b.c0 + c)])
            << "block at (" << b.r0 << ", " << b.c0 << "): element (" << r << ", " << c << ")";
  }
}

}  // namespace
}  // namespace tessel
