// Fused FP8 producers (kernels/fp8_fused.h) against their unfused composition: the fp32 kernel
// (norm.h / act.h) followed by the FP8 quantisation kernels (fp8.h) on its output. The codes, every
// scale and the amax must be identical, and the side outputs (residual sum, mean, rstd) too. The
// dequantised output is also checked against a double-precision norm within FP8's rounding error.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "kernels/reference.h"
#include "tessel/kernels/act.h"
#include "tessel/kernels/fp8.h"
#include "tessel/kernels/fp8_fused.h"
#include "tessel/kernels/norm.h"

using namespace tessel;
using testref::sz;

namespace {

enum class Producer { rmsnorm, layernorm, swiglu, gelu };
enum class Layout { tensor_e4m3, tensor_e5m2, row_tiles, row_and_col_tiles };

struct Case {
  Producer producer;
  Layout layout;
};

// N = 300 rows (a partial 128-row block), D = 200 columns (a partial 128-column tile).
constexpr int64_t kN = 300, kD = 200;

struct Inputs {
  std::vector<float> a, b, w, bias;  // producer inputs: residual / delta (norms), gu or x (activations)
};

Inputs make_inputs(Producer p) {
  testref::Rand rng(17 + int(p));
  Inputs in;
  const bool norm = p == Producer::rmsnorm || p == Producer::layernorm;
  in.a = rng.normals(sz(kN * kD * (p == Producer::swiglu ? 2 : 1)), 2.0);
  if (norm) {
    in.b = rng.normals(sz(kN * kD), 0.5);
    in.w = rng.normals(sz(kD), 1.0);
    in.bias = rng.normals(sz(kD), 0.3);
    // Rows of very different magnitude, so per-tile scales differ.
    for (int64_t i = 0; i < kN; ++i)
      for (int64_t j = 0; j < kD; ++j) in.a[sz(i * kD + j)] *= float(std::ldexp(1.0, int(i % 7) - 3));
  }
  return in;
}

struct SideOutputs {
  std::vector<float> r, mean, rstd;
};

// The producer's fp32 output through the unfused kernel.
std::vector<float> unfused(Producer p, const Inputs& in, SideOutputs& side) {
  std::vector<float> y(sz(kN * kD));
  side.r.assign(sz(kN * kD), 0.0f);
  side.mean.assign(sz(kN), 0.0f);
  side.rstd.assign(sz(kN), 0.0f);
  switch (p) {
    case Producer::rmsnorm:
      kernels::rmsnorm_fwd(kN, kD, in.a.data(), in.b.data(), side.r.data(), in.w.data(), 1e-5f, y.data(),
                           side.rstd.data());
      break;
    case Producer::layernorm:
      kernels::layernorm_fwd(kN, kD, in.a.data(), in.b.data(), side.r.data(), in.w.data(), in.bias.data(), 1e-5f,
                             y.data(), side.mean.data(), side.rstd.data());
      break;
    case Producer::swiglu: kernels::swiglu_fwd(kN, kD, in.a.data(), y.data()); break;
    case Producer::gelu: kernels::gelu_fwd(kN * kD, in.a.data(), y.data()); break;
  }
  return y;
}

void fused(Producer p, const Inputs& in, const kernels::Fp8Out& out, SideOutputs& side) {
  side.r.assign(sz(kN * kD), 0.0f);
  side.mean.assign(sz(kN), 0.0f);
  side.rstd.assign(sz(kN), 0.0f);
  switch (p) {
    case Producer::rmsnorm:
      kernels::rmsnorm_fwd_fp8(kN, kD, in.a.data(), in.b.data(), side.r.data(), in.w.data(), 1e-5f, out,
                               side.rstd.data());
      break;
    case Producer::layernorm:
      kernels::layernorm_fwd_fp8(kN, kD, in.a.data(), in.b.data(), side.r.data(), in.w.data(), in.bias.data(), 1e-5f,
                                 out, side.mean.data(), side.rstd.data());
      break;
    case Producer::swiglu: kernels::swiglu_fwd_fp8(kN, kD, in.a.data(), out); break;
    case Producer::gelu: kernels::gelu_fwd_fp8(kN, kD, in.a.data(), out); break;
  }
}

class Fp8Fused : public ::testing::TestWithParam<Case> {};

TEST_P(Fp8Fused, EqualsTheKernelFollowedByQuantisation) {
  const auto [producer, layout] = GetParam();
  const Inputs in = make_inputs(producer);
  SideOutputs want_side, got_side;
  const std::vector<float> y = unfused(producer, in, want_side);
  const int64_t n = kN * kD, nt = (kD + 127) / 128, ntr = (kN + 127) / 128;
  const bool tiles = layout == Layout::row_tiles || layout == Layout::row_and_col_tiles;
  const DType fmt = layout == Layout::tensor_e5m2 ? DType::e5m2 : DType::e4m3;

  // Reference: quantisation of the fp32 output by the unfused kernels.
  std::vector<uint8_t> want(sz(n)), want_cols(sz(n));
  std::vector<float> want_si(sz(kN * nt)), want_cols_si(sz(kD * ntr));
  const float want_amax = kernels::amax(n, y.data());
  const float scale = kernels::fp8_scale_for(0.5f * want_amax, fmt, 0, false);  // saturates the largest values
  if (tiles) {
    kernels::fp8_quantize_row_tiles(kN, kD, y.data(), kD, fmt, true, want.data(), want_si.data());
    kernels::fp8_quantize_col_tiles_transposed(kN, kD, y.data(), kD, fmt, true, want_cols.data(), want_cols_si.data());
  } else {
    kernels::fp8_quantize(n, y.data(), scale, fmt, want.data());
  }

  std::vector<uint8_t> got(sz(n), 0xAA), got_cols(sz(n), 0xAA);
  std::vector<float> got_si(sz(kN * nt), -1.0f), got_cols_si(sz(kD * ntr), -1.0f);
  float got_amax = -1.0f;
  kernels::Fp8Out out;
  out.fmt = fmt;
  out.tiles = tiles;
  out.data = got.data();
  out.scale = scale;
  out.amax = tiles ? nullptr : &got_amax;
  out.scale_inv = tiles ? got_si.data() : nullptr;
  if (layout == Layout::row_and_col_tiles) {
    out.cols_t = got_cols.data();
    out.cols_scale_inv = got_cols_si.data();
  }
  fused(producer, in, out, got_side);

  int64_t code_mismatch = 0;
  for (int64_t i = 0; i < n; ++i) code_mismatch += got[sz(i)] != want[sz(i)];
  EXPECT_EQ(code_mismatch, 0) << "of " << n << " codes";
  if (tiles) {
    EXPECT_EQ(got_si, want_si);
  } else {
    EXPECT_EQ(got_amax, want_amax);
  }
  if (layout == Layout::row_and_col_tiles) {
    int64_t col_mismatch = 0;
    for (int64_t i = 0; i < n; ++i) col_mismatch += got_cols[sz(i)] != want_cols[sz(i)];
    EXPECT_EQ(col_mismatch, 0) << "of " << n << " column-tile codes";
    EXPECT_EQ(got_cols_si, want_cols_si);
  }
  EXPECT_EQ(got_side.r, want_side.r);
  EXPECT_EQ(got_side.rstd, want_side.rstd);
  EXPECT_EQ(got_side.mean, want_side.mean);
}

// The dequantised fused RMSNorm output against a float64 RMSNorm: every element within half an E4M3
// step of its tile (relative 2^-4 of the element, plus the tile's subnormal step).
TEST(Fp8FusedNorm, RowTilesDequantiseToTheDoubleNorm) {
  const Inputs in = make_inputs(Producer::rmsnorm);
  std::vector<double> x(sz(kN * kD)), want(sz(kN * kD));
  for (size_t i = 0; i < x.size(); ++i) x[i] = double(in.a[i]) + double(in.b[i]);
  std::vector<double> w = testref::to_double(in.w);
  std::vector<double> rstd_ref(sz(kN));
  testref::rmsnorm_fwd(kN, kD, x.data(), w.data(), 1e-5, want.data(), rstd_ref.data());
  const int64_t nt = (kD + 127) / 128;
  std::vector<uint8_t> q(sz(kN * kD));
  std::vector<float> si(sz(kN * nt)), r(sz(kN * kD)), rstd(sz(kN));
  kernels::Fp8Out out;
  out.tiles = true;
  out.data = q.data();
  out.scale_inv = si.data();
  kernels::rmsnorm_fwd_fp8(kN, kD, in.a.data(), in.b.data(), r.data(), in.w.data(), 1e-5f, out, rstd.data());
  double worst = 0;
  for (int64_t i = 0; i < kN; ++i)
    for (int64_t j = 0; j < kD; ++j) {
      const double s_inv = si[sz(i * nt + j / 128)];
      const double got = double(kernels::fp8_decode(q[sz(i * kD + j)], DType::e4m3)) * s_inv;
      const double ref = want[sz(i * kD + j)];
      const double bound = std::fabs(ref) * 0.0625 * 1.001 + std::ldexp(1.0, -10) * s_inv;
      worst = std::max(worst, std::fabs(got - ref) / bound);
    }
  EXPECT_LE(worst, 1.0) << "largest error as a fraction of its bound";
}

TEST(Fp8FusedNorm, NaNReachesTheAmax) {
  Inputs in = make_inputs(Producer::gelu);
  in.a[sz(5 * kD + 7)] = NAN;
  std::vector<uint8_t> q(sz(kN * kD));
  float a = 0.0f;
  kernels::Fp8Out out;
  out.data = q.data();
  out.amax = &a;
  kernels::gelu_fwd_fp8(kN, kD, in.a.data(), out);
  EXPECT_TRUE(std::isnan(a));
  EXPECT_EQ(q[sz(5 * kD + 7)] & 0x7f, 0x7f);  // NaN code
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const char* p[] = {"rmsnorm", "layernorm", "swiglu", "gelu"};
  const char* l[] = {"tensor_e4m3", "tensor_e5m2", "row_tiles", "row_and_col_tiles"};
  return std::string(p[int(info.param.producer)]) + "_" + l[int(info.param.layout)];
}

std::vector<Case> all_cases() {
  std::vector<Case> c;
  for (Producer p : {Producer::rmsnorm, Producer::layernorm, Producer::swiglu, Producer::gelu})
    for (Layout l : {Layout::tensor_e4m3, Layout::tensor_e5m2, Layout::row_tiles, Layout::row_and_col_tiles})
      c.push_back({p, l});
  return c;
}

INSTANTIATE_TEST_SUITE_P(Producers, Fp8Fused, ::testing::ValuesIn(all_cases()), case_name);

}  // namespace
