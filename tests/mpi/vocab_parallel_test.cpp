// Vocabulary-parallel cross-entropy and embedding over the whole world against the single-rank
// kernels (softmax_xent, embedding) on the full vocabulary.
#include <gtest/gtest.h>

#include <cmath>

#include "support/host_access.h"
#include "mpi/mpi_world.h"
#include "tessel/core/rng.h"
#include "tessel/kernels/embedding.h"
#include "tessel/kernels/xent.h"
#include "tessel/nn/vocab_parallel.h"

using namespace tessel;
using tessel::testing::world;

namespace {

constexpr int64_t kV = 48, kN = 7, kD = 6;  // vocab divisible by 1, 2, 4, 8 ranks

Tensor random(const Shape& s, uint64_t stream, float scale) {
  Tensor t = Tensor::empty(s, DType::f32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = scale * philox_normal(4, stream, uint64_t(i));
  return t;
}

Tensor token_ids(uint64_t stream, bool with_ignored) {
  Tensor t = Tensor::empty({kN}, DType::i64);
  for (int64_t i = 0; i < kN; ++i) t.data<int64_t>()[i] = int64_t(philox_uniform(4, stream, uint64_t(i)) * kV) % kV;
  if (with_ignored) t.data<int64_t>()[2] = -1;
  return t;
}

TEST(VocabParallel, CrossEntropyMatchesTheFullVocabulary) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  const int n = world().size(), r = world().rank();
  const int64_t Vl = kV / n, begin = r * Vl;
  const Tensor logits = random({kN, kV}, 1, 4.0f);  // large spread: the max subtraction matters
  const Tensor targets = token_ids(2, true);
  std::vector<float> dfull(size_t(kN * kV));
  const double want = kernels::softmax_xent<float>(kN, kV, logits.data<float>(), targets.data<int64_t>(), 0.25f,
                                                   dfull.data());
  const Tensor local = logits.slice(1, begin, begin + Vl).clone();
  std::vector<float> dl(size_t(kN * Vl));
  const double got = nn::vocab_parallel_cross_entropy(local, targets, begin, 0.25f,
                                                      Tensor::from_blob(dl.data(), {kN, Vl}, DType::f32), world());
  EXPECT_NEAR(got, want, 1e-5 * std::fabs(want));
  for (int64_t i = 0; i < kN; ++i)
    for (int64_t j = 0; j < Vl; ++j)
      ASSERT_NEAR(dl[size_t(i * Vl + j)], dfull[size_t(i * kV + begin + j)], 1e-6) << i << "," << j;
}

TEST(VocabParallel, EmbeddingMatchesTheFullTable) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  const int n = world().size(), r = world().rank();
  const int64_t Vl = kV / n, begin = r * Vl;
  const Tensor table = random({kV, kD}, 3, 1.0f);
  const Tensor tokens = token_ids(5, false);
  Tensor want = Tensor::empty({kN, kD}, DType::f32);
  kernels::embedding_fwd(kN, kD, kV, tokens.data<int64_t>(), table.data<float>(), nullptr, kN, want.data<float>());
  Tensor got;
  nn::vocab_parallel_embedding(tokens, table.slice(0, begin, begin + Vl).clone(), begin, got, world());
  for (int64_t i = 0; i < want.numel(); ++i) ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]);
  // Backward: this rank's slice of the full table gradient.
  const Tensor dout = random({kN, kD}, 6, 1.0f);
  Tensor dfull = Tensor::zeros({kV, kD}, DType::f32), dl = Tensor::zeros({Vl, kD}, DType::f32);
  kernels::embedding_bwd(kN, kD, tokens.data<int64_t>(), dout.data<float>(), dfull.data<float>(), nullptr, kN);
  nn::vocab_parallel_embedding_backward(tokens, dout, begin, dl);
  for (int64_t i = 0; i < Vl * kD; ++i) ASSERT_NEAR(dl.data<float>()[i], dfull.data<float>()[begin * kD + i], 1e-6);
}

}  // namespace
