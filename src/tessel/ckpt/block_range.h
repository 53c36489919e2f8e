#pragma once
// Where a checkpoint piece sits in its global tensor. A piece holds a box of the tensor (a
// tensor-parallel slice: [begin, begin + shape) per dimension, row-major) or a contiguous part of
// one, the elements [flat_begin, flat_end) of the box in row-major order (the distributed
// optimizer's shard of the flat parameter buffer cuts tensors that way). Loading under another
// layout copies the overlap of the pieces saved with the block a rank now needs.
#include <cstdint>
#include <utility>
#include <vector>

#include "tessel/core/tensor.h"

namespace tessel::ckpt {

struct BlockRange {
  Shape begin, shape;
  int64_t flat_begin = 0, flat_end = 0;  // elements of the box, row-major: [0, prod(shape)) is all of it
};

// The whole box [begin, begin + shape).
BlockRange whole_box(Shape begin, Shape shape);

// Whether r is a well-formed part of a tensor of global_shape (same rank, box inside the tensor,
// flat range inside the box); "" if so, else what is wrong.
std::string block_range_problem(const BlockRange& r, const Shape& global_shape);

// Copies the elements `from` and `to` share: src[i] is element from.flat_begin + i of from's box and
// dst[i] element to.flat_begin + i of to's box (both boxes of one global tensor). Sets written[i] for
// every dst[i] written (written has to.flat_end - to.flat_begin entries) and returns their number.
int64_t copy_block_overlap(const BlockRange& from, const float* src, const BlockRange& to, float* dst,
                           std::vector<bool>& written);

// The run of from's elements that copy_block_overlap(from, ..., to, ...) reads, as [first, last)
// counted from from.flat_begin: {0, 0} when the boxes do not meet. Exact (the first and last element
// copied) when the two boxes are equal or both ranges are whole boxes; otherwise it may take in
// elements past both ends of the ones copied. A reader loads only these bytes of a saved piece: for
// a slice of columns (a row-parallel weight under another tensor-parallel size) that is nearly all
// of it, for a slice of rows or a shard of a flat range only the part needed.
//
// Row-major order inside any box is the lexicographic order of global coordinates, so the elements
// of from's box inside to's box run from the intersection's lowest corner to its highest.
std::pair<int64_t, int64_t> overlap_span(const BlockRange& from, const BlockRange& to);

}  // namespace tessel::ckpt
