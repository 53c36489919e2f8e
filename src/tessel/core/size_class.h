#pragma once
// Size classes: every value up to `exact_up_to` is its own class; above it, 8 classes per octave
// (multiples of 2^floor(log2 n) / 8), so rounding up wastes at most 1/8 and the values of a whole
// run fall into a few dozen classes. Shared by the tensor pool (bytes) and the GEMM primitive cache
// (matrix dimensions whose size changes from call to call, e.g. the rows each MoE expert gets).
#include <cstdint>

namespace tessel {

inline constexpr int kSizeClassesPerOctave = 8;

// The smallest class >= n (n >= 0; exact_up_to >= kSizeClassesPerOctave).
int64_t size_class_ceil(int64_t n, int64_t exact_up_to);
// The largest class <= n.
int64_t size_class_floor(int64_t n, int64_t exact_up_to);

}  // namespace tessel
