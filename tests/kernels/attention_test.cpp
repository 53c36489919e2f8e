// Flash-style attention against a naive double softmax attention: forward output and log-sum-exp, and the
// backward (dq, dk, dv of sum(out * dout)) against analytic double gradients. q/k/v live inside one
// fused [N, (H + 2G) Dh + pad] buffer (leading dimension larger than the data), out/dout have padded
// rows too, and gradients go to a fused padded buffer whose pad columns must stay untouched.
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "kernels/reference.h"
#include "tessel/core/check.h"
#include "tessel/kernels/attention.h"

namespace tessel {
namespace {

using kernels::AttentionShape;
using testref::Rand;
using testref::sz;
using testref::Tol;

enum class Dt { f32, bf16 };
constexpr float kSentinel = -4242.5f;

struct AttnCase {
  int64_t B, T, H, G, Dh;
  bool causal;
  double qscale = 1.5;  // spread of q (sharper softmax for larger values)
};

template <class To>
void check_attention(const AttnCase& c, uint64_t seed, const std::vector<float>* qkv_override = nullptr) {
  const int64_t B = c.B, T = c.T, H = c.H, G = c.G, Dh = c.Dh, N = B * T;
  const int64_t ld = (H + 2 * G) * Dh + 3;  // fused q|k|v rows, 3 pad columns
  const int64_t ldo = H * Dh + 2, lddo = H * Dh + 1;
  const AttentionShape s{B, T, H, G, Dh, c.causal, float(1.0 / std::sqrt(double(Dh)))};
  Rand rng(seed);

  std::vector<float> qkv(sz(N * ld), kSentinel);
  if (qkv_override) {
    qkv = *qkv_override;
  } else {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t col = 0; col < (H + 2 * G) * Dh; ++col)
        qkv[sz(n * ld + col)] = float(rng.normal() * (col < H * Dh ? c.qscale : 1.0));
  }
  const float* q = qkv.data();
  const float* k = q + H * Dh;
  const float* v = q + (H + G) * Dh;

  // Dense double copies in the reference's [B, T, heads, Dh] layout.
  std::vector<double> qd(sz(N * H * Dh)), kd(sz(N * G * Dh)), vd(sz(N * G * Dh));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t i = 0; i < H * Dh; ++i) qd[sz(n * H * Dh + i)] = q[n * ld + i];
    for (int64_t i = 0; i < G * Dh; ++i) {
      kd[sz(n * G * Dh + i)] = k[n * ld + i];
      vd[sz(n * G * Dh + i)] = v[n * ld + i];
    }
  }
  const testref::AttnRef ref{B, T, H, G, Dh, c.causal, double(s.scale)};
  std::vector<double> rout, rlse;
  ref.fwd(qd, kd, vd, rout, rlse);

  // Forward.
  std::vector<To> out(sz(N * ldo));
  To out_sentinel;
  testref::store_d(&out_sentinel, kSentinel);
  for (auto& o : out) o = out_sentinel;
  std::vector<float> lse(sz(B * H * T), kSentinel);
  kernels::attention_fwd<To>(s, q, ld, k, ld, v, ld, out.data(), ldo, lse.data());
  std::vector<double> gout(sz(N * H * Dh));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t i = 0; i < H * Dh; ++i) gout[sz(n * H * Dh + i)] = testref::to_d(out[sz(n * ldo + i)]);
    for (int64_t i = H * Dh; i < ldo; ++i)
      ASSERT_EQ(testref::to_d(out[sz(n * ldo + i)]), testref::to_d(out_sentinel)) << "out pad written, row " << n;
  }
  EXPECT_TRUE(testref::all_close(gout, rout, Tol<To>::rel, "out"));
  EXPECT_TRUE(testref::all_close(testref::to_double(lse), rlse, Tol<float>::rel, "lse"));

  // Backward of L = sum(out * dout).
  std::vector<float> dout(sz(N * lddo), kSentinel);
  std::vector<double> dod(sz(N * H * Dh));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < H * Dh; ++i) {
      dout[sz(n * lddo + i)] = float(rng.normal());
      dod[sz(n * H * Dh + i)] = dout[sz(n * lddo + i)];
    }
  // For f32 out the reference is the exact gradient. A bf16 out is rounded (2^-9 relative) before the
  // backward sees it, and the backward's row term D = dout . out inherits that rounding: an absolute
  // error ~2^-9 |dout| |out| in every dS = P (dP - D), which is not small relative to dq and dk when
  // those nearly cancel (T = 1: exactly 0). So for bf16 the reference is the exact function of the
  // inputs the backward is given (D from the bf16 out), checked to the f32 bar; the forward check above
  // already bounds out's rounding.
  std::vector<double> rdq, rdk, rdv;
  const bool given_out = std::is_same_v<To, bf16>;
  std::vector<double> mag[3];
  ref.bwd(qd, kd, vd, dod, rdq, rdk, rdv, given_out ? &gout : nullptr, mag);
  auto max_of = [](const std::vector<double>& x) {
    double m = 0;
    for (double e : x) m = std::max(m, e);
    return m;
  };

  std::vector<float> dqkv(sz(N * ld), 1234.0f);  // junk: gradients are written, not accumulated
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = (H + 2 * G) * Dh; i < ld; ++i) dqkv[sz(n * ld + i)] = kSentinel;
  float* dq = dqkv.data();
  float* dk = dq + H * Dh;
  float* dv = dq + (H + G) * Dh;
  kernels::attention_bwd<To>(s, q, ld, k, ld, v, ld, out.data(), ldo, dout.data(), lddo, lse.data(), dq, ld, dk, ld,
                             dv, ld);
  std::vector<double> gdq(sz(N * H * Dh)), gdk(sz(N * G * Dh)), gdv(sz(N * G * Dh));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t i = 0; i < H * Dh; ++i) gdq[sz(n * H * Dh + i)] = dq[n * ld + i];
    for (int64_t i = 0; i < G * Dh; ++i) {
      gdk[sz(n * G * Dh + i)] = dk[n * ld + i];
      gdv[sz(n * G * Dh + i)] = dv[n * ld + i];
    }
    for (int64_t i = (H + 2 * G) * Dh; i < ld; ++i)
      ASSERT_EQ(dqkv[sz(n * ld + i)], kSentinel) << "gradient pad written, row " << n;
  }
  // Gradients are f32; the error bar is relative to the larger of max |ref| and the largest sum of term
  // magnitudes (dS = P (dP - D) cancels when attention is near-uniform or T = 1).
  EXPECT_TRUE(testref::all_close(gdv, rdv, Tol<float>::rel, "dv", max_of(mag[2])));
  EXPECT_TRUE(testref::all_close(gdq, rdq, Tol<float>::rel, "dq", max_of(mag[0])));
  EXPECT_TRUE(testref::all_close(gdk, rdk, Tol<float>::rel, "dk", max_of(mag[1])));
  if (given_out) {
    // And against the exact gradient: D's rounding is ~2^-9 of the term magnitudes, within the bf16 bar.
    std::vector<double> edq, edk, edv, emag[3];
    ref.bwd(qd, kd, vd, dod, edq, edk, edv, nullptr, emag);
    EXPECT_TRUE(testref::all_close(gdv, edv, Tol<float>::rel, "dv (exact)", max_of(emag[2])));
    EXPECT_TRUE(testref::all_close(gdq, edq, Tol<To>::rel, "dq (exact)", max_of(emag[0])));
    EXPECT_TRUE(testref::all_close(gdk, edk, Tol<To>::rel, "dk (exact)", max_of(emag[1])));
  }
}

// (dtype, causal, (H, G) index, T, Dh)
const std::pair<int64_t, int64_t> kHeads[] = {{4, 2}, {2, 2}, {4, 1}};
class AttentionTest : public ::testing::TestWithParam<std::tuple<Dt, bool, int, int64_t, int64_t>> {};

TEST_P(AttentionTest, ForwardBackwardMatchReference) {
  const auto [dt, causal, hi, T, Dh] = GetParam();
  const AttnCase c{2, T, kHeads[hi].first, kHeads[hi].second, Dh, causal};
  const uint64_t seed = uint64_t(T * 1000 + Dh * 10 + hi * 2 + causal);
  if (dt == Dt::f32)
    check_attention<float>(c, seed);
  else
    check_attention<bf16>(c, seed);
}

std::string attention_name(const ::testing::TestParamInfo<AttentionTest::ParamType>& info) {
  const auto& [dt, causal, hi, T, Dh] = info.param;
  return std::string(dt == Dt::f32 ? "f32" : "bf16") + (causal ? "_causal" : "_full") + "_H" +
         std::to_string(kHeads[hi].first) + "G" + std::to_string(kHeads[hi].second) + "_T" + std::to_string(T) +
         "_Dh" + std::to_string(Dh);
}
INSTANTIATE_TEST_SUITE_P(Grid, AttentionTest,
                         ::testing::Combine(::testing::Values(Dt::f32, Dt::bf16), ::testing::Bool(),
                                            ::testing::Values(0, 1), ::testing::Values<int64_t>(1, 7, 64, 65, 130),
                                            // 48 and 192: MLA query/key heads (DeepSeek-V3: 128 + 64),
                                            // register-blocked like the powers of two.
                                            ::testing::Values<int64_t>(8, 16, 48, 64, 192)),
                         attention_name);

// MQA (G = 1) on a few shapes.
TEST(Attention, MultiQuery) {
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal);
    check_attention<float>({1, 70, 4, 1, 16, causal}, 77 + causal);
  }
}

// Scores of +-40 whose maximum moves from tile to tile (keys later in the sequence score higher), so the
// online softmax must rescale its running sums; a naive exp would overflow nothing here but a wrong
// rescale shows up at O(1).
TEST(Attention, LargeScoresAcrossTiles) {
  const int64_t B = 1, T = 150, H = 2, G = 1, Dh = 8, ld = (H + 2 * G) * Dh + 3;
  Rand rng(9);
  std::vector<float> qkv(sz(B * T * ld), kSentinel);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < (H + 2 * G) * Dh; ++i) qkv[sz(t * ld + i)] = float(rng.normal());
    for (int64_t h = 0; h < H; ++h) qkv[sz(t * ld + h * Dh)] = 8.0f;              // q[.,0] = 8
    qkv[sz(t * ld + H * Dh)] = float(-14.0 + 28.0 * double(t) / double(T - 1));  // k[.,0] ramps up
  }
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal);
    check_attention<float>({B, T, H, G, Dh, causal}, 5, &qkv);
    check_attention<bf16>({B, T, H, G, Dh, causal}, 6, &qkv);
  }
}

// Value heads narrower than query/key heads (multi-latent attention: qk 24, v 16 or 12 here) against
// the same attention with the values zero-padded to the key width, the form checked against the
// double reference above: the padded output columns are 0 and the rest agree, as do dq, dk and the
// unpadded dv (to f32 rounding: the products run through other loops).
template <class To>
void check_narrow_values(int64_t Dv, bool causal) {
  const int64_t B = 2, T = 70, H = 4, G = 2, Dh = 24, N = B * T;
  Rand rng(uint64_t(100 + Dv + causal));
  const std::vector<float> q = rng.normals(sz(N * H * Dh)), k = rng.normals(sz(N * G * Dh));
  const std::vector<float> v = rng.normals(sz(N * G * Dv)), dout = rng.normals(sz(N * H * Dv));
  std::vector<float> vpad(sz(N * G * Dh), 0.0f), doutpad(sz(N * H * Dh), 0.0f);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t g = 0; g < G; ++g)
      for (int64_t d = 0; d < Dv; ++d) vpad[sz((n * G + g) * Dh + d)] = v[sz((n * G + g) * Dv + d)];
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < Dv; ++d) doutpad[sz((n * H + h) * Dh + d)] = dout[sz((n * H + h) * Dv + d)];
  }
  const float scale = float(1.0 / std::sqrt(double(Dh)));
  const AttentionShape narrow{B, T, H, G, Dh, causal, scale, Dv}, padded{B, T, H, G, Dh, causal, scale};
  std::vector<To> out(sz(N * H * Dv)), outpad(sz(N * H * Dh));
  std::vector<float> lse(sz(B * H * T)), lsepad(sz(B * H * T));
  kernels::attention_fwd<To>(narrow, q.data(), H * Dh, k.data(), G * Dh, v.data(), G * Dv, out.data(), H * Dv,
                             lse.data());
  kernels::attention_fwd<To>(padded, q.data(), H * Dh, k.data(), G * Dh, vpad.data(), G * Dh, outpad.data(), H * Dh,
                             lsepad.data());
  std::vector<double> got, want;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < Dh; ++d) {
        const double p = testref::to_d(outpad[sz((n * H + h) * Dh + d)]);
        if (d >= Dv) {
          ASSERT_EQ(p, 0.0) << "padded output column";
          continue;
        }
        got.push_back(testref::to_d(out[sz((n * H + h) * Dv + d)]));
        want.push_back(p);
      }
  EXPECT_TRUE(testref::all_close(got, want, Tol<To>::rel, "out"));
  EXPECT_TRUE(testref::all_close(testref::to_double(lse), testref::to_double(lsepad), Tol<float>::rel, "lse"));

  std::vector<float> dq(q.size()), dk(k.size()), dv(v.size()), dqpad(q.size()), dkpad(k.size()), dvpad(vpad.size());
  kernels::attention_bwd<To>(narrow, q.data(), H * Dh, k.data(), G * Dh, v.data(), G * Dv, out.data(), H * Dv,
                             dout.data(), H * Dv, lse.data(), dq.data(), H * Dh, dk.data(), G * Dh, dv.data(), G * Dv);
  kernels::attention_bwd<To>(padded, q.data(), H * Dh, k.data(), G * Dh, vpad.data(), G * Dh, outpad.data(), H * Dh,
                             doutpad.data(), H * Dh, lsepad.data(), dqpad.data(), H * Dh, dkpad.data(), G * Dh,
                             dvpad.data(), G * Dh);
  EXPECT_TRUE(testref::all_close(testref::to_double(dq), testref::to_double(dqpad), Tol<To>::rel, "dq"));
  EXPECT_TRUE(testref::all_close(testref::to_double(dk), testref::to_double(dkpad), Tol<To>::rel, "dk"));
  got.clear();
  want.clear();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g)
      for (int64_t d = 0; d < Dv; ++d) {
        got.push_back(dv[sz((n * G + g) * Dv + d)]);
        want.push_back(dvpad[sz((n * G + g) * Dh + d)]);
      }
  EXPECT_TRUE(testref::all_close(got, want, Tol<float>::rel, "dv"));
}

TEST(Attention, NarrowerValueHeadsEqualZeroPaddedOnes) {
  for (int64_t Dv : {16, 12})
    for (bool causal : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "Dv " << Dv << (causal ? " causal" : " full"));
      check_narrow_values<float>(Dv, causal);
      check_narrow_values<bf16>(Dv, causal);
    }
}

TEST(Attention, HeadsNotDivisibleThrows) {
  std::vector<float> buf(1024), lse(64);
  const AttentionShape s{1, 2, 3, 2, 4, false, 0.5f};
  EXPECT_THROW(kernels::attention_fwd<float>(s, buf.data(), 28, buf.data(), 28, buf.data(), 28, buf.data(), 12,
                                             lse.data()),
               Error);
}

}  // namespace
}  // namespace tessel
