#include "tessel/core/size_class.h"

#include <bit>

#include "tessel/core/check.h"

namespace tessel {
namespace {

// The spacing of the classes in n's octave.
int64_t class_step(int64_t n) {
  return int64_t(std::bit_floor(uint64_t(n))) / kSizeClassesPerOctave;
}

}  // namespace

int64_t size_class_ceil(int64_t n, int64_t exact_up_to) {
  TESSEL_CHECK(n >= 0 && exact_up_to >= kSizeClassesPerOctave, "size_class_ceil({}, {})", n, exact_up_to);
  if (n <= exact_up_to) return n;
  const int64_t step = class_step(n);
  return (n + step - 1) / step * step;  // a power of two at most: the next octave's first class
}

int64_t size_class_floor(int64_t n, int64_t exact_up_to) {
  TESSEL_CHECK(n >= 0 && exact_up_to >= kSizeClassesPerOctave, "size_class_floor({}, {})", n, exact_up_to);
  if (n <= exact_up_to) return n;
  const int64_t step = class_step(n);
  return n / step * step;
}

}  // namespace tessel
