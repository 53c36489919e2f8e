// The scalar helpers the cpu kernels share (kernels/cpu/elementwise.h), against plain loops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/reference.h"
#include "tessel/kernels/cpu/elementwise.h"

namespace tessel {
namespace {

// max_of against the sequential std::max loop it replaced in cross-entropy (whole and vocabulary-parallel):
// every length from 0 to 70 (below, at and past the 16 running maxima), the maximum at every
// position, with NaNs and infinities among the values (NaNs passed over, as std::max passes them).
TEST(Elementwise, MaxOfIsTheSequentialMaximumAtEveryLengthAndPosition) {
  testref::Rand rng{5};
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  int64_t checked = 0;
  for (int64_t n = 0; n <= 70; ++n)
    for (int64_t at = 0; at < std::max<int64_t>(n, 1); ++at)
      for (const float init : {-inf, 0.5f}) {
        std::vector<float> x = rng.normals(size_t(n), 1.0);
        if (n > 0) x[size_t(at)] = 100.0f + float(at);  // the largest, at each position in turn
        if (n > 3) x[size_t((at + 1) % n)] = nan;
        if (n > 5) x[size_t((at + 2) % n)] = -inf;
        float want = init;
        for (float v : x) want = std::max(want, v);
        EXPECT_EQ(kernels::max_of(n, x.data(), init), want) << "n " << n << " at " << at << " init " << init;
        ++checked;
      }
  EXPECT_GT(checked, 2000);
  // All below the start value: the start value.
  const std::vector<float> low(40, -3.0f);
  EXPECT_EQ(kernels::max_of(40, low.data(), -1.0f), -1.0f);
}

}  // namespace
}  // namespace tessel
