// Column- and row-parallel Linear over the whole world, against the unsharded Linear computed on
// every rank: shard values, forward outputs, input gradients and weight/bias gradient shards.
#include <gtest/gtest.h>

#include <cmath>

#include "support/host_access.h"
#include "mpi/mpi_world.h"
#include "tessel/core/rng.h"
#include "tessel/nn/linear.h"

using namespace tessel;
using tessel::testing::world;

namespace {

// q/k/v-like fused parts (global out features), all divisible by 1, 2, 4 and 8 ranks.
const std::vector<nn::Linear::Part> kParts{{"a", 24}, {"b", 8}, {"c", 16}};
constexpr int64_t kIn = 16, kN = 5;

Tensor random_matrix(int64_t r, int64_t c, uint64_t stream) {
  Tensor t = Tensor::empty({r, c}, DType::f32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = philox_normal(9, stream, uint64_t(i));
  return t;
}

// Biases get values that depend on their global index, so shards can be checked against the full one.
void set_biases(nn::ParamStore& ps) {
  for (const auto& s : ps.specs())
    if (s.name.find(".bias") != std::string::npos)
      for (int64_t j = 0; j < s.numel; ++j)
        ps.params_data()[s.offset + j] = 0.01f * float(s.slice_begin[0] + j) + float(s.name[0] - 'a');
  ps.refresh_compute_copy();
}

// Global column of local output column c of a column-parallel fused Linear on rank r of n.
int64_t global_out_column(int64_t c, int r, int n) {
  int64_t local_base = 0, global_base = 0;
  for (const auto& p : kParts) {
    const int64_t local = p.out / n;
    if (c < local_base + local) return global_base + r * local + (c - local_base);
    local_base += local;
    global_base += p.out;
  }
  return -1;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, double(std::fabs(t.data<float>()[i])));
  return m;
}

void expect_close(double got, double want, double scale, const std::string& what) {
  ASSERT_NEAR(got, want, 1e-5 * scale + 1e-7) << what;
}

struct Pair {
  nn::ParamStore full{DType::f32}, shard{DType::f32};
  std::unique_ptr<nn::Linear> full_lin, tp_lin;
  Pair(nn::TensorParallel::Mode mode) {
    full_lin = std::make_unique<nn::Linear>(full, kParts, kIn, true, 0.1f);
    tp_lin = std::make_unique<nn::Linear>(shard, kParts, kIn, true, 0.1f, nn::TensorParallel{mode, &world()});
    full.finalize();
    shard.finalize();
    full.initialize(3);
    shard.initialize(3);
    set_biases(full);
    set_biases(shard);
  }
  // Every shard element equals the full tensor at its global index (values or gradients).
  void expect_shards_match(bool grads) {
    for (const auto& s : shard.specs()) {
      const auto& f = full.spec(s.name);
      const float* sv = (grads ? shard.grads_data() : shard.params_data()) + s.offset;
      const float* fv = (grads ? full.grads_data() : full.params_data()) + f.offset;
      double scale = 0;
      for (int64_t i = 0; i < f.numel; ++i) scale = std::max(scale, double(std::fabs(fv[i])));
      const int64_t cols = s.shape.size() == 2 ? s.shape[1] : s.shape[0];
      const int64_t fcols = f.shape.size() == 2 ? f.shape[1] : f.shape[0];
      for (int64_t i = 0; i < s.numel; ++i) {
        const int64_t r = i / cols, c = i % cols;
        const int64_t gr = s.shape.size() == 2 ? r + s.slice_begin[0] : 0;
        const int64_t gc = c + s.slice_begin.back();
        expect_close(sv[i], fv[gr * fcols + gc], scale, s.name + (grads ? " grad" : " value"));
      }
    }
  }
};

TEST(TensorParallel, ColumnParallelLinearMatchesTheFullLinear) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  const int n = world().size(), r = world().rank();
  Pair p(nn::TensorParallel::Mode::column);
  p.expect_shards_match(false);
  const Tensor x = random_matrix(kN, kIn, 1);
  nn::Activations sf, st;
  const Tensor y_full = p.full_lin->forward(x, sf), y = p.tp_lin->forward(x, st);
  ASSERT_EQ(y.size(1), 48 / n);
  for (int64_t i = 0; i < kN; ++i)
    for (int64_t c = 0; c < y.size(1); ++c)
      expect_close(y.data<float>()[i * y.size(1) + c], y_full.data<float>()[i * 48 + global_out_column(c, r, n)],
                   max_abs(y_full), "y");
  const Tensor dy_full = random_matrix(kN, 48, 2);
  Tensor dy = Tensor::empty({kN, 48 / n}, DType::f32);
  for (int64_t i = 0; i < kN; ++i)
    for (int64_t c = 0; c < 48 / n; ++c) dy.data<float>()[i * (48 / n) + c] = dy_full.data<float>()[i * 48 + global_out_column(c, r, n)];
  const Tensor dx_full = p.full_lin->backward_input(dy_full, sf), dx = p.tp_lin->backward_input(dy, st);
  for (int64_t i = 0; i < dx.numel(); ++i) expect_close(dx.data<float>()[i], dx_full.data<float>()[i], max_abs(dx_full), "dx");
  p.full.zero_grads();
  p.shard.zero_grads();
  p.full_lin->backward_weight(sf);
  p.tp_lin->backward_weight(st);
  p.expect_shards_match(true);
}

TEST(TensorParallel, RowParallelLinearMatchesTheFullLinear) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  const int n = world().size(), r = world().rank();
  Pair p(nn::TensorParallel::Mode::row);
  p.expect_shards_match(false);
  const Tensor x_full = random_matrix(kN, kIn, 3);
  const int64_t in_local = kIn / n;
  const Tensor x = x_full.slice(1, r * in_local, (r + 1) * in_local).clone();
  nn::Activations sf, st;
  const Tensor y_full = p.full_lin->forward(x_full, sf), y = p.tp_lin->forward(x, st);
  for (int64_t i = 0; i < y.numel(); ++i) expect_close(y.data<float>()[i], y_full.data<float>()[i], max_abs(y_full), "y");
  const Tensor dy = random_matrix(kN, 48, 4);
  const Tensor dx_full = p.full_lin->backward_input(dy, sf), dx = p.tp_lin->backward_input(dy, st);
  for (int64_t i = 0; i < kN; ++i)
    for (int64_t c = 0; c < in_local; ++c)
      expect_close(dx.data<float>()[i * in_local + c], dx_full.data<float>()[i * kIn + r * in_local + c],
                   max_abs(dx_full), "dx");
  p.full.zero_grads();
  p.shard.zero_grads();
  p.full_lin->backward_weight(sf);
  p.tp_lin->backward_weight(st);
  p.expect_shards_match(true);
}

}  // namespace
