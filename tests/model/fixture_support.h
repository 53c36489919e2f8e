#pragma once
// Loading PyTorch fixtures (tests/fixtures) into a model and comparing the engine's fp32 tensors with
// them, shared by the fixture tests of this folder.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "tessel/ckpt/safetensors.h"
#include "tessel/core/tensor.h"
#include "tessel/nn/model.h"
#include "support/host_access.h"

namespace tessel::fixture {

inline double max_abs(const Tensor& t) {
  const testing::HostAccess host;
  double m = 0;
  const float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, double(std::fabs(p[i])));
  return m;
}

// max |a - b| / max |b|: the error relative to the tensor's scale.
inline double rel_err(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.numel(), want.numel());
  const testing::HostAccess host;
  double e = 0;
  const float* a = got.data<float>();
  const float* b = want.data<float>();
  for (int64_t i = 0; i < got.numel(); ++i) e = std::max(e, double(std::fabs(a[i] - b[i])));
  const double scale = max_abs(want);
  return scale > 0 ? e / scale : e;
}

// Copies every "param.<name>" of the fixture into the model; the two must hold the same parameters.
inline void load_params(nn::Model& model, const ckpt::SafetensorsFile& f) {
  auto& ps = model.params();
  int loaded = 0;
  for (const auto& spec : ps.specs()) {
    const Tensor& src = f.get("param." + spec.name);
    ASSERT_EQ(src.shape(), spec.shape) << spec.name;
    ps.param(spec.name).copy_from(src);
    ++loaded;
  }
  int in_file = 0;
  for (const auto& [name, t] : f.tensors) in_file += name.rfind("param.", 0) == 0;
  ASSERT_EQ(loaded, in_file) << "the fixture holds parameters the model does not have";
  ps.refresh_compute_copy();
}

}  // namespace tessel::fixture
