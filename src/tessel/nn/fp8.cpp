#include "tessel/nn/fp8.h"

#include <algorithm>
#include <cmath>

#include "tessel/core/check.h"
#include "tessel/core/profiler.h"
#include "tessel/kernels/fp8.h"
#include "tessel/kernels/fp8_quantize.h"
#include "tessel/nn/params.h"

namespace tessel::nn {

Fp8Recipe Fp8Recipe::parse(const std::string& recipe, const std::string& format, int64_t history_len,
                           const std::string& algo, int64_t margin, bool pow2) {
  Fp8Recipe r;
  if (recipe == "none") return r;
  r.kind = recipe == "delayed" ? Kind::delayed : recipe == "current" ? Kind::current : recipe == "block" ? Kind::block
                                                                                                         : Kind::none;
  TESSEL_CHECK(r.kind != Kind::none, "precision.fp8.recipe: '{}' is not supported (allowed: none, delayed, current, "
               "block)", recipe);
  TESSEL_CHECK(format == "e4m3" || format == "hybrid",
               "precision.fp8.format: '{}' is not supported (allowed: e4m3, hybrid)", format);
  r.backward = format == "hybrid" ? DType::e5m2 : DType::e4m3;
  TESSEL_CHECK(history_len >= 1, "precision.fp8.amax_history_len must be >= 1, got {}", history_len);
  r.history_len = history_len;
  TESSEL_CHECK(algo == "max" || algo == "most_recent",
               "precision.fp8.amax_compute_algo: '{}' is not supported (allowed: max, most_recent)", algo);
  r.history_max = algo == "max";
  TESSEL_CHECK(margin >= 0 && margin < 32, "precision.fp8.margin must be in [0, 32), got {}", margin);
  r.margin = int(margin);
  r.pow2 = pow2 || r.kind == Kind::block;
  return r;
}

Fp8State::Fp8State(const Fp8Recipe& recipe) : r_(recipe) {
  TESSEL_CHECK(r_.enabled(), "Fp8State needs an FP8 recipe");
}

int Fp8State::add(const std::string& name, DType fmt, bool tp_amax) {
  names_.push_back(name);
  tp_amax_.push_back(tp_amax);
  expert_.push_back(is_routed_expert_name(name));
  formats_.push_back(fmt);
  history_.emplace_back(static_cast<size_t>(r_.history_len), 0.0f);
  scale_.push_back(1.0f);  // TransformerEngine's initial scale
  step_amax_.push_back(0.0f);
  return int(names_.size()) - 1;
}

kernels::Fp8Tensor Fp8State::per_tensor(const Tensor& x, int slot, DType fmt, bool record) {
  const float a = kernels::amax(x);  // the scale needs it on the host (an explicit copy)
  float s;
  if (r_.kind == Fp8Recipe::Kind::delayed) {
    s = scale_[size_t(slot)];
    if (record) fold_amax(slot, a);
  } else {
    float global = a;
    if (amax_group_ && tp_amax_[size_t(slot)]) amax_group_->all_reduce(&global, 1, DType::f32, comm::ReduceOp::max);
    s = kernels::fp8_scale_for(global, fmt, r_.margin, r_.pow2);
  }
  kernels::Fp8Tensor q{Tensor::empty(x.shape(), fmt), Tensor::empty({1}, DType::f32), kernels::Fp8Scaling::tensor};
  kernels::fp8_quantize(x, s, q);
  return q;
}

kernels::Fp8Tensor Fp8State::quantize_rows(const Tensor& x, int slot, DType fmt) {
  ProfileScope prof("fp8_quantize");
  TESSEL_CHECK(x.dim() == 2 && x.is_contiguous(), "FP8 quantisation expects a contiguous 2-D tensor, got {}", x.str());
  if (r_.kind != Fp8Recipe::Kind::block) return per_tensor(x, slot, fmt, !evaluating_);
  const int64_t R = x.size(0), C = x.size(1), nt = (C + kernels::kFp8Tile - 1) / kernels::kFp8Tile;
  kernels::Fp8Tensor q{Tensor::empty({R, C}, fmt), Tensor::empty({R, nt}, DType::f32), kernels::Fp8Scaling::row_tiles};
  kernels::fp8_quantize_row_tiles(x, q);
  return q;
}

kernels::Fp8Tensor Fp8State::quantize_cols_transposed(const Tensor& x, int slot, DType fmt) {
  ProfileScope prof("fp8_quantize");
  TESSEL_CHECK(r_.kind == Fp8Recipe::Kind::block, "column tiles are for block scaling (slot {})", names_[size_t(slot)]);
  const int64_t R = x.size(0), C = x.size(1), nt = (R + kernels::kFp8Tile - 1) / kernels::kFp8Tile;
  kernels::Fp8Tensor q{Tensor::empty({C, R}, fmt), Tensor::empty({C, nt}, DType::f32), kernels::Fp8Scaling::row_tiles};
  kernels::fp8_quantize_col_tiles_transposed(x, q);
  return q;
}

void Fp8State::record_amax(int slot, float a) {
  if (!evaluating_) fold_amax(slot, a);
}

void Fp8State::fold_amax(int slot, float a) {
  float& m = step_amax_[size_t(slot)];
  m = std::isnan(a) || std::isnan(m) ? NAN : std::max(m, a);
}

bool Fp8State::fuses_producers() const {
  return r_.fused_casts && (r_.kind == Fp8Recipe::Kind::delayed || r_.kind == Fp8Recipe::Kind::block);
}

Fp8Input Fp8State::fused_input(int slot, DType fmt, int64_t N, int64_t D) const {
  TESSEL_CHECK(fuses_producers(), "slot {}: this FP8 recipe does not quantise in the producing kernel",
               names_[size_t(slot)]);
  const int64_t t = kernels::kFp8Tile;
  Fp8Input in;
  in.slot = slot;
  in.out.fmt = fmt;
  if (r_.kind == Fp8Recipe::Kind::block) {
    in.rows = {Tensor::empty({N, D}, fmt), Tensor::empty({N, (D + t - 1) / t}, DType::f32),
               kernels::Fp8Scaling::row_tiles};
    in.cols_t = {Tensor::empty({D, N}, fmt), Tensor::empty({D, (N + t - 1) / t}, DType::f32),
                 kernels::Fp8Scaling::row_tiles};
    in.out.tiles = true;
    in.out.scale_inv = static_cast<float*>(in.rows.scale_inv.device_ptr());
    in.out.cols_t = static_cast<uint8_t*>(in.cols_t.data.device_ptr());
    in.out.cols_scale_inv = static_cast<float*>(in.cols_t.scale_inv.device_ptr());
  } else {
    in.rows = {Tensor::empty({N, D}, fmt), Tensor::empty({1}, DType::f32), kernels::Fp8Scaling::tensor};
    in.amax = Tensor::zeros({1}, DType::f32);
    in.out.scale = scale_[size_t(slot)];
    in.out.amax = static_cast<float*>(in.amax.device_ptr());
    in.rows.scale_inv.fill(double(1.0f / in.out.scale));  // a host-to-device copy of one value
  }
  in.out.data = static_cast<uint8_t*>(in.rows.data.device_ptr());
  return in;
}

kernels::Fp8Tensor Fp8State::quantize_weight(const Tensor& w, int slot) {
  ProfileScope prof("fp8_quantize");
  TESSEL_CHECK(w.dim() == 2 && (w.dtype() == DType::f32 || w.dtype() == DType::bf16),
               "FP8 weights are quantised from fp32 or bf16 [out, in], got {}", w.str());
  if (r_.kind != Fp8Recipe::Kind::block) return per_tensor(w, slot, r_.forward, !evaluating_);
  const int64_t R = w.size(0), C = w.size(1), t = kernels::kFp8Tile;
  kernels::Fp8Tensor q{Tensor::empty({R, C}, r_.forward), Tensor::empty({(R + t - 1) / t, (C + t - 1) / t}, DType::f32),
                       kernels::Fp8Scaling::blocks};
  kernels::fp8_quantize_blocks(w, q);
  return q;
}

void Fp8State::end_step(const std::vector<comm::Communicator*>& groups,
                        const std::vector<comm::Communicator*>& expert_groups) {
  ++steps_;
  if (r_.kind != Fp8Recipe::Kind::delayed || names_.empty()) return;
  // One scale per tensor for every rank: the step's amaxes reduced (max) in one message per group,
  // routed experts' over the ranks holding the same experts (other ranks' slots at the same index
  // belong to other experts).
  for (const bool experts : {false, true}) {
    const auto& gs = experts && !expert_groups.empty() ? expert_groups : groups;
    std::vector<float> part;
    for (size_t i = 0; i < names_.size(); ++i)
      if (expert_[i] == experts) part.push_back(step_amax_[i]);
    if (part.empty()) continue;
    for (comm::Communicator* g : gs)
      if (g && g->size() > 1) g->all_reduce(part.data(), int64_t(part.size()), DType::f32, comm::ReduceOp::max);
    for (size_t i = 0, j = 0; i < names_.size(); ++i)
      if (expert_[i] == experts) step_amax_[i] = part[j++];
  }
  for (size_t i = 0; i < names_.size(); ++i) {
    auto& h = history_[i];
    std::rotate(h.rbegin(), h.rbegin() + 1, h.rend());  // shift: h[0] becomes this step
    h[0] = step_amax_[i];
    step_amax_[i] = 0.0f;
    const float a = r_.history_max ? *std::max_element(h.begin(), h.end()) : h[0];
    if (a > 0.0f && std::isfinite(a)) scale_[i] = kernels::fp8_scale_for(a, formats_[i], r_.margin, r_.pow2);  // else keep
  }
}

std::vector<std::pair<std::string, Tensor>> Fp8State::state_tensors() const {
  const DeviceAccessScope host_copy;  // host state into tensors
  std::vector<std::pair<std::string, Tensor>> out;
  if (r_.kind != Fp8Recipe::Kind::delayed) return out;
  for (size_t i = 0; i < names_.size(); ++i) {
    Tensor h = Tensor::empty({r_.history_len}, DType::f32), s = Tensor::empty({1}, DType::f32);
    std::copy(history_[i].begin(), history_[i].end(), h.data<float>());
    s.data<float>()[0] = scale_[i];
    out.emplace_back("fp8." + names_[i] + ".amax_history", h);
    out.emplace_back("fp8." + names_[i] + ".scale", s);
  }
  return out;
}

bool Fp8State::load_state(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  const DeviceAccessScope host_copy;  // tensors back into host state
  auto find = [&](const std::string& n) -> const Tensor* {
    for (const auto& [k, t] : tensors)
      if (k == n) return &t;
    return nullptr;
  };
  for (size_t i = 0; i < names_.size(); ++i) {
    const Tensor* h = find("fp8." + names_[i] + ".amax_history");
    const Tensor* s = find("fp8." + names_[i] + ".scale");
    if (!h || !s) return false;
    TESSEL_CHECK(h->numel() == r_.history_len, "checkpoint FP8 state '{}' has an amax history of {}, "
                 "precision.fp8.amax_history_len is {}", names_[i], h->numel(), r_.history_len);
    std::copy(h->data<float>(), h->data<float>() + h->numel(), history_[i].begin());
    scale_[i] = s->data<float>()[0];
  }
  return true;
}

Fp8State::Evaluation::Evaluation(Fp8State* state) : state_(state), was_evaluating_(state && state->evaluating_) {
  if (state_) state_->evaluating_ = true;
}

Fp8State::Evaluation::~Evaluation() {
  if (state_) state_->evaluating_ = was_evaluating_;
}

}  // namespace tessel::nn
