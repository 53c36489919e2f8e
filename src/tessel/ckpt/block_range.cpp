#include "tessel/ckpt/block_range.h"

#include <algorithm>
#include <cstring>

#include "tessel/core/check.h"

namespace tessel::ckpt {

BlockRange whole_box(Shape begin, Shape shape) {
  BlockRange r{std::move(begin), std::move(shape), 0, 1};
  for (int64_t d : r.shape) r.flat_end *= d;
  return r;
}

std::string block_range_problem(const BlockRange& r, const Shape& global_shape) {
  if (r.begin.size() != global_shape.size() || r.shape.size() != global_shape.size())
    return fmt::format("a block of rank {} / {} in a tensor of rank {}", r.begin.size(), r.shape.size(),
                       global_shape.size());
  int64_t numel = 1;
  for (size_t d = 0; d < global_shape.size(); ++d) {
    if (r.begin[d] < 0 || r.shape[d] < 0 || r.begin[d] > global_shape[d] || r.shape[d] > global_shape[d] - r.begin[d])
      return fmt::format("dimension {} spans [{}, {}) of {}", d, r.begin[d], r.begin[d] + r.shape[d], global_shape[d]);
    numel *= r.shape[d];
  }
  if (r.flat_begin < 0 || r.flat_begin > r.flat_end || r.flat_end > numel)
    return fmt::format("elements [{}, {}) of a block of {}", r.flat_begin, r.flat_end, numel);
  return "";
}

int64_t copy_block_overlap(const BlockRange& from, const float* src, const BlockRange& to, float* dst,
                           std::vector<bool>& written) {
  const size_t rank = from.shape.size();
  TESSEL_CHECK(to.shape.size() == rank && from.begin.size() == rank && to.begin.size() == rank,
               "copy_block_overlap: blocks of rank {} and {}", rank, to.shape.size());
  if (rank == 0) {  // a scalar: one element, in both ranges or not
    if (from.flat_begin > 0 || from.flat_end < 1 || to.flat_begin > 0 || to.flat_end < 1) return 0;
    dst[0] = src[0];
    written[0] = true;
    return 1;
  }
  // Boxes that do not meet share nothing.
  for (size_t d = 0; d < rank; ++d)
    if (std::max(from.begin[d], to.begin[d]) >= std::min(from.begin[d] + from.shape[d], to.begin[d] + to.shape[d]))
      return 0;
  const size_t last = rank - 1;
  const int64_t row = from.shape[last];  // elements per row of from's box
  const int64_t to_lo = to.begin[last], to_hi = to.begin[last] + to.shape[last];
  int64_t copied = 0;
  // One row of from's box at a time: the row's global coordinates in the leading dimensions decide
  // whether it lies in to's box, and the last dimension is a contiguous run in both.
  for (int64_t f = from.flat_begin; f < from.flat_end;) {
    const int64_t r = f / row, c0 = f % row, c1 = std::min(row, c0 + (from.flat_end - f));
    const int64_t next = r * row + c1;
    bool inside = true;
    int64_t to_row = 0, rest = r, stride = 1;
    // Unravel r over from's leading dimensions (last leading dimension fastest) and ravel into to's.
    for (size_t d = last; d-- > 0;) {
      const int64_t g = from.begin[d] + rest % from.shape[d];
      rest /= from.shape[d];
      if (g < to.begin[d] || g >= to.begin[d] + to.shape[d]) {
        inside = false;
        break;
      }
      to_row += (g - to.begin[d]) * stride;
      stride *= to.shape[d];
    }
    if (inside) {
      const int64_t g0 = std::max(from.begin[last] + c0, to_lo), g1 = std::min(from.begin[last] + c1, to_hi);
      if (g0 < g1) {
        const int64_t t0 = to_row * to.shape[last] + (g0 - to_lo);
        const int64_t lo = std::max(t0, to.flat_begin), hi = std::min(t0 + (g1 - g0), to.flat_end);
        if (lo < hi) {
          const int64_t s = (f - from.flat_begin) + (g0 - from.begin[last] - c0) + (lo - t0);
          std::memcpy(dst + (lo - to.flat_begin), src + s, size_t(hi - lo) * sizeof(float));
          std::fill(written.begin() + (lo - to.flat_begin), written.begin() + (hi - to.flat_begin), true);
          copied += hi - lo;
        }
      }
    }
    f = next;
  }
  return copied;
}

std::pair<int64_t, int64_t> overlap_span(const BlockRange& from, const BlockRange& to) {
  const size_t rank = from.shape.size();
  TESSEL_CHECK(to.shape.size() == rank && from.begin.size() == rank && to.begin.size() == rank,
               "overlap_span: blocks of rank {} and {}", rank, to.shape.size());
  int64_t lo = from.flat_begin, hi = from.flat_end;
  if (from.begin == to.begin && from.shape == to.shape) {
    lo = std::max(lo, to.flat_begin);
    hi = std::min(hi, to.flat_end);
  } else {
    // The flat indices, in from's box, of the intersection's lowest and highest corners.
    int64_t first = 0, last = 0;
    for (size_t d = 0; d < rank; ++d) {
      const int64_t b = std::max(from.begin[d], to.begin[d]);
      const int64_t e = std::min(from.begin[d] + from.shape[d], to.begin[d] + to.shape[d]);
      if (b >= e) return {0, 0};
      first = first * from.shape[d] + (b - from.begin[d]);
      last = last * from.shape[d] + (e - 1 - from.begin[d]);
    }
    lo = std::max(lo, first);
    hi = std::min(hi, last + 1);
  }
  if (lo >= hi) return {0, 0};
  return {lo - from.flat_begin, hi - from.flat_begin};
}

}  // namespace tessel::ckpt
