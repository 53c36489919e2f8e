// Token (+ position) embedding: forward is an exact gather (+ one fp32 add), backward accumulates into
// dW / dpos, including tokens repeated many times in the batch; token ids are range-checked.
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "kernels/reference.h"
#include "tessel/core/check.h"
#include "tessel/kernels/embedding.h"

namespace tessel {
namespace {

using testref::Rand;
using testref::sz;
using testref::Tol;

// (B, T, D, V, with positions)
class EmbeddingTest : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, int64_t, int64_t, bool>> {};

TEST_P(EmbeddingTest, ForwardAndBackward) {
  const auto [B, T, D, V, with_pos] = GetParam();
  const int64_t N = B * T;
  Rand rng(uint64_t(B * 31 + T * 7 + D * 3 + V));
  const std::vector<float> W = rng.normals(sz(V * D)), P = rng.normals(sz(T * D));
  std::vector<int64_t> tok(sz(N));
  for (int64_t n = 0; n < N; ++n) tok[sz(n)] = n % 3 == 0 ? 0 : rng.integer(0, V - 1);  // token 0 repeats a lot
  if (N > 1) tok[sz(N - 1)] = V - 1;

  std::vector<float> out(sz(N * D), -1.0f);
  kernels::embedding_fwd(N, D, V, tok.data(), W.data(), with_pos ? P.data() : nullptr, T, out.data());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < D; ++j) {
      const float want = with_pos ? W[sz(tok[sz(n)] * D + j)] + P[sz((n % T) * D + j)] : W[sz(tok[sz(n)] * D + j)];
      ASSERT_EQ(out[sz(n * D + j)], want) << "row " << n << " col " << j;
    }

  // Backward accumulates into non-zero gradients.
  const std::vector<float> dout = rng.normals(sz(N * D));
  std::vector<float> dW = rng.normals(sz(V * D)), dpos = rng.normals(sz(T * D));
  std::vector<double> rdW = testref::to_double(dW), rdpos = testref::to_double(dpos);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < D; ++j) {
      rdW[sz(tok[sz(n)] * D + j)] += dout[sz(n * D + j)];
      rdpos[sz((n % T) * D + j)] += dout[sz(n * D + j)];
    }
  const std::vector<float> dpos0 = dpos;
  kernels::embedding_bwd(N, D, tok.data(), dout.data(), dW.data(), with_pos ? dpos.data() : nullptr, T);
  EXPECT_TRUE(testref::all_close(testref::to_double(dW), rdW, Tol<float>::rel, "dW"));
  if (with_pos) {
    EXPECT_TRUE(testref::all_close(testref::to_double(dpos), rdpos, Tol<float>::rel, "dpos"));
  } else {
    EXPECT_EQ(dpos, dpos0);
  }
}

std::string embedding_name(const ::testing::TestParamInfo<EmbeddingTest::ParamType>& info) {
  const auto& [B, T, D, V, pos] = info.param;
  return "B" + std::to_string(B) + "_T" + std::to_string(T) + "_D" + std::to_string(D) + "_V" + std::to_string(V) +
         (pos ? "_pos" : "");
}
INSTANTIATE_TEST_SUITE_P(Grid, EmbeddingTest,
                         ::testing::Combine(::testing::Values<int64_t>(1, 3), ::testing::Values<int64_t>(1, 7, 65),
                                            ::testing::Values<int64_t>(1, 17, 130),
                                            ::testing::Values<int64_t>(1, 1000), ::testing::Bool()),
                         embedding_name);

// Every row the same token: dW[tok] = sum of all rows, exactly as a double sum rounded (to fp32 bar).
TEST(Embedding, AllRowsSameToken) {
  const int64_t N = 500, D = 37, V = 4, T = 50;
  Rand rng(2);
  std::vector<int64_t> tok(sz(N), 2);
  const std::vector<float> dout = rng.normals(sz(N * D));
  std::vector<float> dW(sz(V * D), 0.0f);
  kernels::embedding_bwd(N, D, tok.data(), dout.data(), dW.data(), nullptr, T);
  std::vector<double> ref(sz(V * D), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < D; ++j) ref[sz(2 * D + j)] += dout[sz(n * D + j)];
  EXPECT_TRUE(testref::all_close(testref::to_double(dW), ref, Tol<float>::rel, "dW"));
}

TEST(Embedding, OutOfRangeTokenThrows) {
  const int64_t D = 4, V = 10, T = 3;
  std::vector<float> W(sz(V * D), 1.0f), out(sz(3 * D));
  for (int64_t bad : {V, V + 7, int64_t(-1)}) {
    SCOPED_TRACE(bad);
    std::vector<int64_t> tok = {1, bad, 2};
    EXPECT_THROW(kernels::embedding_fwd(3, D, V, tok.data(), W.data(), nullptr, T, out.data()), Error);
  }
  try {
    std::vector<int64_t> tok = {1, 2, 12};
    kernels::embedding_fwd(3, D, V, tok.data(), W.data(), nullptr, T, out.data());
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("12"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessel
