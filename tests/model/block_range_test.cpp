// copy_block_overlap (ckpt/block_range.h), the core of resharding, against an element-by-element
// reference: every element of the destination range takes the source's value at the same global
// coordinates when the source range holds it, and stays untouched otherwise.
#include <gtest/gtest.h>

#include <random>

#include "tessel/ckpt/block_range.h"

using namespace tessel;
using ckpt::BlockRange;

namespace {

// Row-major global coordinates of element `flat` of box r.
std::vector<int64_t> coords_of(const BlockRange& r, int64_t flat) {
  std::vector<int64_t> c(r.shape.size());
  for (size_t d = r.shape.size(); d-- > 0;) {
    c[d] = r.begin[d] + flat % r.shape[d];
    flat /= r.shape[d];
  }
  return c;
}

// Element index of global coordinates c in r's flat range, or -1 when r does not hold it.
int64_t index_in(const BlockRange& r, const std::vector<int64_t>& c) {
  int64_t flat = 0;
  for (size_t d = 0; d < r.shape.size(); ++d) {
    if (c[d] < r.begin[d] || c[d] >= r.begin[d] + r.shape[d]) return -1;
    flat = flat * r.shape[d] + (c[d] - r.begin[d]);
  }
  return flat >= r.flat_begin && flat < r.flat_end ? flat - r.flat_begin : -1;
}

BlockRange random_range(std::mt19937& rng, const Shape& global) {
  BlockRange r;
  int64_t numel = 1;
  for (int64_t g : global) {
    const int64_t b = std::uniform_int_distribution<int64_t>(0, g - 1)(rng);
    const int64_t len = std::uniform_int_distribution<int64_t>(1, g - b)(rng);
    r.begin.push_back(b);
    r.shape.push_back(len);
    numel *= len;
  }
  r.flat_begin = std::uniform_int_distribution<int64_t>(0, numel)(rng);
  r.flat_end = std::uniform_int_distribution<int64_t>(r.flat_begin, numel)(rng);
  return r;
}

TEST(BlockRange, CopiesExactlyTheElementsBothRangesHold) {
  std::mt19937 rng(7);
  const std::vector<Shape> globals{{13}, {5, 7}, {3, 4, 6}, {2, 3, 2, 5}, {1, 9}};
  for (int trial = 0; trial < 400; ++trial) {
    const Shape& global = globals[size_t(trial) % globals.size()];
    const BlockRange from = random_range(rng, global), to = random_range(rng, global);
    ASSERT_EQ(ckpt::block_range_problem(from, global), "");
    std::vector<float> src(size_t(from.flat_end - from.flat_begin));
    for (size_t i = 0; i < src.size(); ++i) src[i] = float(i) + 0.5f;
    const size_t n = size_t(to.flat_end - to.flat_begin);
    std::vector<float> dst(n, -1.0f), want(n, -1.0f);
    std::vector<bool> written(n, false);
    int64_t want_count = 0;
    for (size_t j = 0; j < n; ++j) {
      const int64_t i = index_in(from, coords_of(to, to.flat_begin + int64_t(j)));
      if (i >= 0) {
        want[j] = src[size_t(i)];
        ++want_count;
      }
    }
    EXPECT_EQ(ckpt::copy_block_overlap(from, src.data(), to, dst.data(), written), want_count) << "trial " << trial;
    EXPECT_EQ(dst, want) << "trial " << trial;
    for (size_t j = 0; j < n; ++j) EXPECT_EQ(written[j], want[j] != -1.0f) << "trial " << trial << " element " << j;
  }
}

// overlap_span against the elements copy_block_overlap reads, found one by one: it holds every one
// of them; it is exactly their first to last when the boxes are equal or both ranges are whole boxes;
// it is
// empty when the boxes do not meet.
TEST(BlockRange, TheSpanToReadHoldsEveryElementCopied) {
  std::mt19937 rng(11);
  const std::vector<Shape> globals{{13}, {5, 7}, {3, 4, 6}, {2, 3, 2, 5}, {1, 9}};
  int exact_cases = 0;
  for (int trial = 0; trial < 1200; ++trial) {
    const Shape& global = globals[size_t(trial) % globals.size()];
    BlockRange from = random_range(rng, global), to = random_range(rng, global);
    if (trial % 3 == 1) {  // a tensor-parallel slice from a piece that is one
      to = ckpt::whole_box(to.begin, to.shape);
      from = ckpt::whole_box(from.begin, from.shape);
    }
    if (trial % 3 == 2) {  // a distributed-optimizer shard of the same box
      to = ckpt::whole_box(from.begin, from.shape);
      to.flat_begin = std::uniform_int_distribution<int64_t>(0, to.flat_end)(rng);
      to.flat_end = std::uniform_int_distribution<int64_t>(to.flat_begin, to.flat_end)(rng);
    }
    int64_t first = -1, last = -1;  // the first and last element of `from` read, from its flat_begin
    for (int64_t j = to.flat_begin; j < to.flat_end; ++j) {
      const int64_t i = index_in(from, coords_of(to, j));
      if (i < 0) continue;
      first = first < 0 ? i : std::min(first, i);
      last = std::max(last, i);
    }
    const auto [lo, hi] = ckpt::overlap_span(from, to);
    bool meet = true;
    for (size_t d = 0; d < global.size(); ++d)
      meet = meet && std::max(from.begin[d], to.begin[d]) < std::min(from.begin[d] + from.shape[d], to.begin[d] + to.shape[d]);
    if (!meet) {
      EXPECT_EQ(std::make_pair(lo, hi), std::make_pair(int64_t(0), int64_t(0))) << "trial " << trial;
    }
    if (first < 0) continue;
    EXPECT_LE(lo, first) << "trial " << trial;
    EXPECT_GT(hi, last) << "trial " << trial;
    const bool same_box = from.begin == to.begin && from.shape == to.shape;
    const auto whole = [](const BlockRange& r) {
      return r.flat_begin == 0 && r.flat_end == ckpt::whole_box(r.begin, r.shape).flat_end;
    };
    if (same_box || (whole(to) && whole(from))) {
      EXPECT_EQ(std::make_pair(lo, hi), std::make_pair(first, last + 1)) << "trial " << trial;
      ++exact_cases;
    }
  }
  EXPECT_GT(exact_cases, 100);  // both exact kinds were drawn often (134 with this seed)
}

TEST(BlockRange, AScalarIsOneElement) {
  const BlockRange whole = ckpt::whole_box({}, {});
  EXPECT_EQ(whole.flat_end, 1);
  float src = 3.0f, dst = 0.0f;
  std::vector<bool> written(1, false);
  EXPECT_EQ(ckpt::copy_block_overlap(whole, &src, whole, &dst, written), 1);
  EXPECT_EQ(dst, 3.0f);
}

TEST(BlockRange, ProblemsNameTheDimensionOrTheRange) {
  EXPECT_EQ(ckpt::block_range_problem({{0, 4}, {2, 4}, 0, 8}, {4, 8}), "");
  EXPECT_EQ(ckpt::block_range_problem({{0, 6}, {2, 4}, 0, 8}, {4, 8}), "dimension 1 spans [6, 10) of 8");
  EXPECT_EQ(ckpt::block_range_problem({{0, 0}, {2, 4}, 3, 9}, {4, 8}), "elements [3, 9) of a block of 8");
  EXPECT_EQ(ckpt::block_range_problem({{0}, {2}, 0, 2}, {4, 8}), "a block of rank 1 / 1 in a tensor of rank 2");
}

}  // namespace
