// FP8 scaling across ranks: delayed scaling's per-step amax is reduced (max) over the given groups,
// so every rank pushes the same history entry and uses the same scale; current scaling with an amax
// group scales a sharded tensor as the whole tensor.
#include <gtest/gtest.h>

#include "support/host_access.h"
#include "mpi/mpi_world.h"
#include "tessel/kernels/fp8.h"
#include "tessel/nn/fp8.h"

using namespace tessel;
using tessel::testing::world;

namespace {

Tensor row_with_amax(float a) {  // [1, 3] with |max| = a
  Tensor t = Tensor::empty({1, 3}, DType::f32);
  t.data<float>()[0] = a / 4;
  t.data<float>()[1] = -a;
  t.data<float>()[2] = a / 2;
  return t;
}

TEST(Fp8Amax, DelayedScalingReducesTheStepsAmaxAcrossRanks) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  const int n = world().size(), r = world().rank();
  nn::Fp8State st(nn::Fp8Recipe::parse("delayed", "hybrid", 4, "max", 0, false));
  const int x = st.add("l.x", DType::e4m3), dy = st.add("l.dy", DType::e5m2);
  for (int step = 0; step < 2; ++step) {
    // Rank r sees amax (r + 1) * (step + 1) for x and 1 / (r + 1) for dy.
    st.quantize_rows(row_with_amax(float((r + 1) * (step + 1))), x, DType::e4m3);
    st.quantize_rows(row_with_amax(1.0f / float(r + 1)), dy, DType::e5m2);
    st.end_step({&world()});
    EXPECT_FLOAT_EQ(st.history(x)[0], float(n * (step + 1)));
    EXPECT_FLOAT_EQ(st.history(dy)[0], 1.0f);
  }
  EXPECT_FLOAT_EQ(st.scale(x), 448.0f / float(2 * n));  // the window's max
  EXPECT_FLOAT_EQ(st.scale(dy), 57344.0f);
  // The same on every rank.
  float s = st.scale(x), lo = s, hi = s;
  world().all_reduce(&lo, 1, DType::f32, comm::ReduceOp::min);
  world().all_reduce(&hi, 1, DType::f32, comm::ReduceOp::max);
  EXPECT_EQ(lo, hi);
}

TEST(Fp8Amax, CurrentScalingOfAShardUsesTheWholeTensorsAmax) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  const int r = world().rank();
  nn::Fp8State st(nn::Fp8Recipe::parse("current", "e4m3", 1, "max", 0, false));
  st.set_amax_group(&world());
  const int slot = st.add("l.w", DType::e4m3);
  const kernels::Fp8Tensor q = st.quantize_rows(row_with_amax(float(r + 1)), slot, DType::e4m3);
  EXPECT_FLOAT_EQ(q.scale_inv.data<float>()[0], float(world().size()) / 448.0f);
}

}  // namespace
