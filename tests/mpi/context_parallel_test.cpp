// Context-parallel (ring) attention against single-device attention over the whole sequence: every
// rank draws the same global q, k, v, dout, computes the reference, runs the ring on its own
// load-balanced rows and compares out, lse, dq, dk, dv with the reference at the same global rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "support/host_access.h"
#include "mpi/mpi_world.h"
#include "tessel/core/rng.h"
#include "tessel/kernels/attention.h"
#include "tessel/nn/context_parallel.h"

using namespace tessel;
using tessel::testing::world;

namespace {

constexpr int64_t kB = 2, kH = 4, kG = 2, kDh = 16;
constexpr int64_t kHD = kH * kDh, kGD = kG * kDh, kLd = kHD + 2 * kGD;  // local q, k, v: one fused buffer

std::vector<float> random_values(int64_t n, uint64_t stream) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = philox_normal(17, stream, uint64_t(i));
  return x;
}

float as_float(float x) { return x; }
float as_float(bf16 x) { return float(x); }

// Largest |got - want| relative to the largest |want| of the whole reference; NaN counts as infinite.
struct MaxError {
  double diff = 0, scale = 0;
  void add(double got, double want) {
    const double d = std::fabs(got - want);
    if (!(d <= diff)) diff = std::isnan(d) ? std::numeric_limits<double>::infinity() : d;
  }
  double relative() const { return diff / (scale > 0 ? scale : 1.0); }
};

template <class T>
double max_abs(const std::vector<T>& v) {
  double m = 0;
  for (const T& x : v) m = std::max(m, double(std::fabs(as_float(x))));
  return m;
}

// Errors of out, lse, dq, dk, dv, the worst over all ranks of `all`.
struct Errors {
  float e[5];
  static constexpr const char* kNames[5] = {"out", "lse", "dq", "dk", "dv"};
};

// Runs cp_attention_fwd/bwd over group `cp` with chunk length L (global T = 2 * C * L) and compares
// with kernels::attention_fwd/bwd over the whole sequence.
template <class To>
Errors run_ring(comm::Communicator& cp, int64_t L, bool causal) {
  const int C = cp.size(), rank = cp.rank();
  const int64_t T = 2 * C * L, Tl = 2 * L;
  const std::vector<float> q = random_values(kB * T * kHD, 1), k = random_values(kB * T * kGD, 2),
                           v = random_values(kB * T * kGD, 3), dout = random_values(kB * T * kHD, 4);
  const kernels::AttentionShape full{kB, T, kH, kG, kDh, causal, 1.0f / std::sqrt(float(kDh))};
  std::vector<To> out_ref(static_cast<size_t>(kB * T * kHD));
  std::vector<float> lse_ref(static_cast<size_t>(kB * kH * T)), dq_ref(q.size()), dk_ref(k.size()), dv_ref(v.size());
  kernels::attention_fwd<To>(full, q.data(), kHD, k.data(), kGD, v.data(), kGD, out_ref.data(), kHD, lse_ref.data());
  kernels::attention_bwd<To>(full, q.data(), kHD, k.data(), kGD, v.data(), kGD, out_ref.data(), kHD, dout.data(), kHD,
                             lse_ref.data(), dq_ref.data(), kHD, dk_ref.data(), kGD, dv_ref.data(), kGD);

  // This rank's rows: q, k, v in one fused [B*Tl, H*Dh + 2*G*Dh] buffer (as a fused QKV projection).
  std::vector<int64_t> pos(static_cast<size_t>(Tl));
  for (int64_t t = 0; t < Tl; ++t) pos[size_t(t)] = nn::cp_global_position(t, T, rank, C);
  std::vector<float> qkv(static_cast<size_t>(kB * Tl * kLd)), dout_l(static_cast<size_t>(kB * Tl * kHD));
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t t = 0; t < Tl; ++t) {
      const int64_t g = b * T + pos[size_t(t)], l = b * Tl + t;
      std::copy_n(q.data() + g * kHD, kHD, qkv.data() + l * kLd);
      std::copy_n(k.data() + g * kGD, kGD, qkv.data() + l * kLd + kHD);
      std::copy_n(v.data() + g * kGD, kGD, qkv.data() + l * kLd + kHD + kGD);
      std::copy_n(dout.data() + g * kHD, kHD, dout_l.data() + l * kHD);
    }
  kernels::AttentionShape local = full;
  local.T = Tl;
  std::vector<To> out(static_cast<size_t>(kB * Tl * kHD));
  std::vector<float> lse(static_cast<size_t>(kB * kH * Tl));
  const float* ql = qkv.data();
  nn::cp_attention_fwd<To>(local, ql, kLd, ql + kHD, kLd, ql + kHD + kGD, kLd, out.data(), kHD, lse.data(), cp);
  // NaN-filled, so any gradient element the backward fails to write shows up.
  std::vector<float> dqkv(qkv.size(), std::numeric_limits<float>::quiet_NaN());
  float* dl = dqkv.data();
  nn::cp_attention_bwd<To>(local, ql, kLd, ql + kHD, kLd, ql + kHD + kGD, kLd, out.data(), kHD, dout_l.data(), kHD,
                           lse.data(), dl, kLd, dl + kHD, kLd, dl + kHD + kGD, kLd, cp);

  MaxError e[5];
  e[0].scale = max_abs(out_ref);
  e[1].scale = max_abs(lse_ref);
  e[2].scale = max_abs(dq_ref);
  e[3].scale = max_abs(dk_ref);
  e[4].scale = max_abs(dv_ref);
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t t = 0; t < Tl; ++t) {
      const int64_t g = b * T + pos[size_t(t)], l = b * Tl + t;
      for (int64_t c = 0; c < kHD; ++c) {
        e[0].add(as_float(out[size_t(l * kHD + c)]), as_float(out_ref[size_t(g * kHD + c)]));
        e[2].add(dqkv[size_t(l * kLd + c)], dq_ref[size_t(g * kHD + c)]);
      }
      for (int64_t c = 0; c < kGD; ++c) {
        e[3].add(dqkv[size_t(l * kLd + kHD + c)], dk_ref[size_t(g * kGD + c)]);
        e[4].add(dqkv[size_t(l * kLd + kHD + kGD + c)], dv_ref[size_t(g * kGD + c)]);
      }
      for (int64_t h = 0; h < kH; ++h)
        e[1].add(lse[size_t((b * kH + h) * Tl + t)], lse_ref[size_t((b * kH + h) * T + pos[size_t(t)])]);
    }
  Errors out_e{};
  for (int i = 0; i < 5; ++i) out_e.e[i] = float(std::min(e[i].relative(), 1e30));
  world().all_reduce(out_e.e, 5, DType::f32, comm::ReduceOp::max);
  return out_e;
}

// Runs the ring on `cp` (a group of world) and checks every error against tol.
template <class To>
void expect_ring_matches(comm::Communicator& cp, int64_t L, bool causal, double tol, const char* what) {
  const Errors e = run_ring<To>(cp, L, causal);
  if (world().rank() == 0)
    std::printf("[ context parallel ] %s C=%d L=%lld causal=%d: max error / max |ref|  out %.2e  lse %.2e  dq %.2e  "
                "dk %.2e  dv %.2e\n",
                what, cp.size(), static_cast<long long>(L), int(causal), e.e[0], e.e[1], e.e[2], e.e[3], e.e[4]);
  for (int i = 0; i < 5; ++i) EXPECT_LT(e.e[i], tol) << what << " " << Errors::kNames[i] << " C=" << cp.size() << " L=" << L;
}

TEST(ContextParallel, PositionsCoverTheSequenceOnceInBalancedChunks) {
  for (int C : {1, 2, 3, 4, 8, world().size()}) {
    const int64_t L = 5, T = 2 * C * L;
    std::vector<int> seen(static_cast<size_t>(T), 0);
    for (int r = 0; r < C; ++r)
      for (int64_t t = 0; t < 2 * L; ++t) {
        const int64_t p = nn::cp_global_position(t, T, r, C);
        ASSERT_TRUE(p >= 0 && p < T) << p;
        ++seen[size_t(p)];
        // Chunks r and 2C-1-r, in that order, each contiguous.
        EXPECT_EQ(p, t < L ? r * L + t : (2 * C - 1 - r) * L + t - L);
      }
    for (int64_t p = 0; p < T; ++p) EXPECT_EQ(seen[size_t(p)], 1) << "position " << p << " C=" << C;
  }
}

TEST(ContextParallel, LocalSliceTakesThisRanksRows) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  const int C = world().size(), r = world().rank();
  const int64_t B = 3, T = 4 * C;
  Tensor tokens = Tensor::empty({B, T}, DType::i64);
  Tensor hidden = Tensor::empty({B, T, 3}, DType::f32);
  for (int64_t i = 0; i < B * T; ++i) {
    tokens.data<int64_t>()[i] = 1000 * (i / T) + i % T;
    for (int64_t c = 0; c < 3; ++c) hidden.data<float>()[i * 3 + c] = float(i * 3 + c);
  }
  const Tensor lt = nn::cp_local_slice(tokens, r, C), lh = nn::cp_local_slice(hidden, r, C);
  ASSERT_EQ(lt.shape(), (Shape{B, 4}));
  ASSERT_EQ(lh.shape(), (Shape{B, 4, 3}));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < 4; ++t) {
      const int64_t p = nn::cp_global_position(t, T, r, C);
      EXPECT_EQ(lt.data<int64_t>()[b * 4 + t], 1000 * b + p);
      for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(lh.data<float>()[(b * 4 + t) * 3 + c], float((b * T + p) * 3 + c));
    }
}

TEST(ContextParallel, RefusesLengthsNotDivisibleIntoTwoChunksPerRank) {
  const int C = world().size();
  auto expect_refused = [](auto&& f, const char* what) {
    try {
      f();
      ADD_FAILURE() << what << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("divisible"), std::string::npos) << e.what();
    }
  };
  const Tensor tokens = Tensor::zeros({2, 2 * C + 1}, DType::i64);
  expect_refused([&] { nn::cp_local_slice(tokens, 0, C); }, "slicing T = 2C + 1");
  expect_refused([&] { nn::cp_global_position(0, 4 * C + 2, 0, 2 * C); }, "position for T = 4C + 2 over 2C ranks");
  // An odd local length is refused before any communication (every rank throws alike).
  const kernels::AttentionShape odd{1, 7, kH, kG, kDh, true, 0.25f};
  std::vector<float> x(static_cast<size_t>(7 * kLd)), o(static_cast<size_t>(7 * kHD)), lse(static_cast<size_t>(7 * kH));
  expect_refused(
      [&] {
        nn::cp_attention_fwd<float>(odd, x.data(), kLd, x.data(), kLd, x.data(), kLd, o.data(), kHD, lse.data(), world());
      },
      "attention over 7 local rows");
}

TEST(ContextParallel, RingAttentionMatchesFullAttentionFp32) {
  expect_ring_matches<float>(world(), 8, true, 1e-5, "f32");
  expect_ring_matches<float>(world(), 72, true, 1e-5, "f32 multi-tile chunks");  // chunks longer than a kernel tile
}

TEST(ContextParallel, RingAttentionWithoutCausalMaskMatchesFullAttention) {
  expect_ring_matches<float>(world(), 8, false, 1e-5, "f32 bidirectional");
}

TEST(ContextParallel, RingAttentionWithBf16OutputMatchesFullAttention) {
  expect_ring_matches<bf16>(world(), 8, true, 1e-2, "bf16 out");
}

TEST(ContextParallel, RingAttentionOverSplitGroups) {
  // Interleaved groups of size / 2 (size 1 at np 2: the ring degenerates to local attention).
  auto half = world().split(world().rank() % 2, world().rank());
  expect_ring_matches<float>(*half, 8, true, 1e-5, "f32 split group");
  auto local = comm::make_local_communicator();
  expect_ring_matches<float>(*local, 8, true, 1e-5, "f32 local communicator");
}

}  // namespace
