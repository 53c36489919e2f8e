// Every module's backward (input gradient and parameter gradients) against central finite
// differences of the scalar L = sum(forward(x) * R), R fixed and random (whole models: their own loss,
// in double). fp32 modules, so the step h = 1e-2 balances truncation (O(h^2)) against rounding
// (~1e-7 |L| / h). Two checks per tensor: 12 sampled elements within 2e-2 (3e-2 for whole models) of
// the tensor's largest gradient, which catches wrong formulas but not errors confined to small
// gradients; and the smallest-magnitude tenth of the elements against a bound of their own
// (check_small_gradients, below).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <vector>

#include "support/host_access.h"
#include "tessel/core/rng.h"
#include "tessel/nn/attention.h"
#include "tessel/nn/embedding.h"
#include "tessel/nn/linear.h"
#include "tessel/nn/mlp.h"
#include "tessel/nn/model.h"
#include "tessel/nn/mla.h"
#include "tessel/nn/moe.h"
#include "tessel/nn/norm.h"
#include "tessel/nn/transformer_layer.h"

using namespace tessel;
using nn::Activations;

namespace {

Tensor random_tensor(const Shape& s, uint64_t stream, float std = 1.0f) {
  Tensor t = Tensor::empty(s, DType::f32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = std * philox_normal(7, stream, uint64_t(i));
  return t;
}

void randomize_params(nn::ParamStore& ps) {
  for (int64_t i = 0; i < ps.numel(); ++i) ps.params_data()[i] = 0.3f * philox_normal(11, 99, uint64_t(i));
  ps.refresh_compute_copy();
}

double dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += double(a.data<float>()[i]) * double(b.data<float>()[i]);
  return s;
}

// (L(p + step) - L(p - step)) / (the two steps as fp32 took them), p restored afterwards.
template <class Loss>
double central_difference(nn::ParamStore& ps, const Loss& loss, float* p, double step) {
  const float orig = *p, up = orig + float(step), down = orig - float(step);
  *p = up;
  ps.refresh_compute_copy();
  const double lp = loss();
  *p = down;
  ps.refresh_compute_copy();
  const double lm = loss();
  *p = orig;
  ps.refresh_compute_copy();
  return (lp - lm) / (double(up) - double(down));
}

// Small gradients. The sampled check allows an error of tol x the tensor's largest gradient
// everywhere, so an element whose gradient is 1% of the largest could be wrong by 100% and pass. Here
// the smallest-magnitude tenth of each tensor's (analytic) gradients is compared with a bound of its
// own, not relative to the largest:
// - Richardson's extrapolation R = (4 D(h) - D(2h)) / 3 of central differences D removes their h^2
//   truncation term; |D(h) - D(2h)| / 3 (the h^2 error of D(h), far above R's h^4 one) bounds what
//   is left.
// - Rounding: the fp32 forward makes each L off by a pseudo-random amount, D(h) by that / h. It is
//   measured, not guessed: D at h and at h (1 + 1/64) share their truncation (to 3%) but not their
//   rounding, so |D(h) - D(h')| samples the noise of D (about sqrt(2) x its size). The largest sample
//   over every checked element of the module, x 3, bounds R's noise (about 1.35 x D's).
// - The analytic gradient is fp32: 1e-5 of the largest (the kernel tolerance, testref::Tol<float>)
//   for its own rounding, plus 1e-3 of itself.
// What it proves: each checked element's analytic gradient equals dL/dp to within that bound (printed
// on failure). Measured: for modules the bound is 5e-5..3e-4 of the tensor's largest gradient (p10..p90),
// 70-400x tighter than the sampled check; for whole models, whose fp32 forward of a loss of ~40 is
// noisier, 7e-4..8e-2 (median 5e-3); the observed errors stay below 0.38 of the bound. A backward
// error on small gradients of that size fails here: a 1% error in the RMSNorm backward's projection
// term (c *= 1.01 in rmsnorm_bwd) passes every sampled check and fails 42 small-gradient checks in the
// five tests that run an RMSNorm. Up to kSmallSamples elements per tensor, spread over the smallest
// tenth from the very smallest, keep the cost bounded.
constexpr int64_t kSmallSamples = 6;
constexpr double kStep = 1e-2;  // h

struct SmallGradientProbe {
  std::string what;
  int64_t index;
  double analytic, largest;  // this element's gradient and its tensor's largest
  double d_h, d_2h, d_shifted;  // central differences at h, 2h and h (1 + 1/64)
};

// Probes the smallest tenth of analytic[0, n) (by magnitude) with difference(element, step).
template <class Difference>
void probe_small_gradients(const std::string& what, int64_t n, const float* analytic, float* values, double largest,
                           double h, const Difference& difference, std::vector<SmallGradientProbe>& probes) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t b) { return std::fabs(analytic[a]) < std::fabs(analytic[b]); });
  const int64_t tenth = std::max<int64_t>(1, n / 10), samples = std::min(tenth, kSmallSamples);
  for (int64_t s = 0; s < samples; ++s) {
    const int64_t i = order[size_t(s * tenth / samples)];
    probes.push_back({what, i, double(analytic[i]), largest, difference(values + i, h), difference(values + i, 2 * h),
                      difference(values + i, h * (1 + 1.0 / 64))});
  }
}

void check_small_gradients(const std::vector<SmallGradientProbe>& probes) {
  double noise = 0;
  for (const auto& p : probes) noise = std::max(noise, std::fabs(p.d_h - p.d_shifted));
  for (const auto& p : probes) {
    const double richardson = (4 * p.d_h - p.d_2h) / 3, truncation = std::fabs(p.d_h - p.d_2h) / 3;
    const double bound = 3 * noise + truncation + 1e-5 * p.largest + 1e-3 * std::fabs(richardson);
    EXPECT_NEAR(p.analytic, richardson, bound)
        << p.what << "[" << p.index << "], a small gradient (the tensor's largest: " << p.largest
        << "): bound = 3 x noise " << noise << " + truncation " << truncation << " + fp32 slack";
  }
}

using Forward = std::function<Tensor(const Tensor& x, Activations&)>;
using Backward = std::function<Tensor(const Tensor& dy, Activations&)>;  // returns dx, accumulates param grads

// The backward of a module with backward_input / backward_weight: dx, then the weight gradients.
template <class Module>
Backward input_then_weights(Module& m) {
  return [&m](const Tensor& dy, Activations& a) {
    Tensor dx = m.backward_input(dy, a);
    m.backward_weight(a);
    return dx;
  };
}

// Compares the analytic gradients (dx for a float input x, and the parameters' in ps) with central
// differences of loss(): sampled elements within tol x the tensor's largest gradient + fd_noise, and
// the smallest tenth within their own bound (check_small_gradients).
template <class Loss>
void compare_with_differences(nn::ParamStore& ps, const Loss& loss, const Tensor& x, const Tensor& dx, double fd_noise,
                              double tol) {
  const double h = kStep;
  auto difference = [&](float* p, double step) { return central_difference(ps, loss, p, step); };
  std::vector<SmallGradientProbe> probes;
  auto compare = [&](const std::string& what, int64_t n, float* values, const float* analytic) {
    double scale = 1e-3;
    for (int64_t i = 0; i < n; ++i) scale = std::max(scale, double(std::fabs(analytic[i])));
    const int64_t samples = std::min<int64_t>(n, 12);
    for (int64_t s = 0; s < samples; ++s) {
      const int64_t i = (s * 7919) % n;
      const double fd = difference(values + i, h);
      EXPECT_NEAR(analytic[i], fd, tol * scale + fd_noise) << what << "[" << i << "]";
    }
    probe_small_gradients(what, n, analytic, values, scale, h, difference, probes);
  };
  if (x.defined() && x.dtype() == DType::f32) {
    ASSERT_TRUE(dx.defined());
    compare("input", x.numel(), x.data<float>(), dx.data<float>());
  }
  for (const auto& spec : ps.specs())
    compare(spec.name, spec.numel, ps.params_data() + spec.offset, ps.grads_data() + spec.offset);
  check_small_gradients(probes);
}

// A module: L = sum(forward(x) * R), R fixed and random; bwd(R) gives dx and the parameter gradients.
void check_gradients(nn::ParamStore& ps, Tensor x, const Forward& fwd, const Backward& bwd, double tol = 2e-2) {
  Activations saved;
  ps.zero_grads();
  Tensor y = fwd(x, saved);
  const Tensor R = random_tensor(y.shape(), 5);
  Tensor dx = bwd(R, saved);
  auto loss = [&]() {
    Activations scratch;
    return dot(fwd(x, scratch), R);
  };
  // Rounding noise of a central difference: L is a sum of fp32 terms, each off by ~2^-24 relative.
  double abs_sum = 0;
  for (int64_t i = 0; i < y.numel(); ++i) abs_sum += std::fabs(double(y.data<float>()[i]) * R.data<float>()[i]);
  compare_with_differences(ps, loss, x, dx, 8 * 6e-8 * abs_sum / (2 * kStep), tol);
}

// A whole model's scalar objective, kept in double (an fp32 copy of a loss of ~40 would quantise the
// differences to 2e-4): backward() accumulates its gradients (scale 1).
void check_objective_gradients(nn::ParamStore& ps, const std::function<double()>& objective,
                               const std::function<void()>& backward, double tol) {
  ps.zero_grads();
  backward();
  const double fd_noise = 8 * 6e-8 * std::fabs(objective()) / (2 * kStep);
  compare_with_differences(ps, objective, Tensor(), Tensor(), fd_noise, tol);
}

nn::ModelConfig small_config(const std::string& arch) {
  nn::ModelConfig c;
  c.arch = arch;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_attention_heads = 4;
  c.num_query_groups = arch == "llama" ? 2 : 4;
  c.ffn_hidden_size = 24;
  c.vocab_size = 19;
  c.seq_length = 7;
  return c;
}

constexpr int64_t kBatch = 2;

// [kBatch, seq_length] token ids (i * a + b) mod vocab_size.
Tensor token_ids(const nn::ModelConfig& cfg, int64_t a, int64_t b) {
  Tensor t = Tensor::empty({kBatch, cfg.seq_length}, DType::i64);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int64_t>()[i] = (i * a + b) % cfg.vocab_size;
  return t;
}

// Finalises and randomises ps, then checks module m on a random [kBatch x seq_length, hidden] input.
template <class Module>
void check_module(nn::ParamStore& ps, Module& m, const nn::ModelConfig& cfg, const Forward& fwd) {
  ps.finalize();
  randomize_params(ps);
  check_gradients(ps, random_tensor({kBatch * cfg.seq_length, cfg.hidden_size}, 1), fwd, input_then_weights(m));
}

TEST(FiniteDifference, LinearWithFusedPartsAndBias) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  nn::ParamStore ps(DType::f32);
  nn::Linear lin(ps, {{"a", 5}, {"b", 3}}, 6, true, 0.1f);
  ps.finalize();
  randomize_params(ps);
  check_gradients(
      ps, random_tensor({9, 6}, 1), [&](const Tensor& x, Activations& a) { return lin.forward(x, a); },
      input_then_weights(lin));
}

class NormFd : public ::testing::TestWithParam<nn::Norm::Kind> {};

TEST_P(NormFd, FusedResidualAdd) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  nn::ParamStore ps(DType::f32);
  nn::Norm norm(ps, "n", 10, GetParam(), 1e-5f);
  ps.finalize();
  randomize_params(ps);
  const Tensor delta = random_tensor({6, 10}, 2);
  const Tensor dresid = random_tensor({6, 10}, 3);
  // Output: y and r_out both feed L (y through R, r_out through dresid), as in a decoder layer.
  check_gradients(
      ps, random_tensor({6, 10}, 1),
      [&](const Tensor& x, Activations& a) {
        Tensor r;
        Tensor y = norm.forward(x, delta, r, a);
        Tensor both = Tensor::empty({6, 20}, DType::f32);
        for (int64_t i = 0; i < 6; ++i)
          for (int64_t j = 0; j < 10; ++j) {
            both.data<float>()[i * 20 + j] = y.data<float>()[i * 10 + j];
            both.data<float>()[i * 20 + 10 + j] =
                r.data<float>()[i * 10 + j] * dresid.data<float>()[i * 10 + j];  // d/dr = dresid * R
          }
        return both;
      },
      [&](const Tensor& dboth, Activations& a) {
        Tensor dy = Tensor::empty({6, 10}, DType::f32), dr = Tensor::empty({6, 10}, DType::f32);
        for (int64_t i = 0; i < 6; ++i)
          for (int64_t j = 0; j < 10; ++j) {
            dy.data<float>()[i * 10 + j] = dboth.data<float>()[i * 20 + j];
            dr.data<float>()[i * 10 + j] = dboth.data<float>()[i * 20 + 10 + j] * dresid.data<float>()[i * 10 + j];
          }
        return norm.backward(dy, dr, a);
      });
}

INSTANTIATE_TEST_SUITE_P(Kinds, NormFd, ::testing::Values(nn::Norm::Kind::rms, nn::Norm::Kind::layer));

class ArchFd : public ::testing::TestWithParam<std::string> {};

TEST_P(ArchFd, SelfAttention) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  const auto cfg = small_config(GetParam());
  nn::ParamStore ps(DType::f32);
  auto rope = cfg.is_llama() ? std::make_shared<kernels::RopeTable>(cfg.seq_length, cfg.head_dim(), cfg.rotary_base)
                             : nullptr;
  nn::SelfAttention attn(ps, "attn", cfg, cfg.num_layers, rope);
  ps.finalize();
  randomize_params(ps);
  check_gradients(
      ps, random_tensor({kBatch * cfg.seq_length, cfg.hidden_size}, 1),
      [&](const Tensor& x, Activations& a) { return attn.forward(x, kBatch, a); },
      input_then_weights(attn));
}

TEST_P(ArchFd, Mlp) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  const auto cfg = small_config(GetParam());
  nn::ParamStore ps(DType::f32);
  nn::Mlp mlp(ps, "mlp", cfg, cfg.num_layers);
  check_module(ps, mlp, cfg, [&](const Tensor& x, Activations& a) { return mlp.forward(x, a); });
}

// Mixture of Experts: routed experts (top-2 of 4, each run on its own tokens), a shared expert and
// the router (its gradient through the normalised gate weights). Finite differences hold the
// selection as long as no step of h crosses a top-k boundary; the data here keeps clear margins.
TEST(FiniteDifference, MixtureOfExperts) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  for (const char* score : {"softmax", "sigmoid"}) {
    nn::ModelConfig cfg = small_config("llama");
    cfg.num_experts = 4;
    cfg.moe_router_topk = 2;
    cfg.moe_ffn_hidden_size = 12;
    cfg.moe_shared_expert_intermediate_size = 8;
    cfg.moe_router_score_function = score;
    cfg.moe_router_topk_scaling_factor = 1.5;
    nn::ParamStore ps(DType::f32);
    nn::Moe moe(ps, "moe", cfg, cfg.num_layers);
    check_module(ps, moe, cfg, [&](const Tensor& x, Activations& a) { return moe.forward(x, 1.0f, a); });
  }
}

// Multi-head latent attention, with and without the low-rank query: latent norms, the shared RoPE
// key, the padded values.
TEST(FiniteDifference, MultiLatentAttention) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  for (const int64_t q_lora : {0, 12}) {
    nn::ModelConfig cfg = small_config("llama");
    cfg.arch = "deepseek_v3";
    cfg.q_lora_rank = q_lora;
    cfg.kv_lora_rank = 10;
    cfg.qk_head_dim = 6;
    cfg.qk_pos_emb_head_dim = 4;
    cfg.v_head_dim = 5;
    auto rope = std::make_shared<kernels::RopeTable>(cfg.seq_length, cfg.qk_pos_emb_head_dim, cfg.rotary_base);
    nn::ParamStore ps(DType::f32);
    nn::MlaAttention mla(ps, "attn", cfg, cfg.num_layers, rope);
    check_module(ps, mla, cfg, [&](const Tensor& x, Activations& a) { return mla.forward(x, kBatch, a); });
  }
}

// Token dropping: with a capacity of half the even share, the copies an expert cannot take contribute
// nothing, and the gradients stay those of the function computed (dropping by position keeps the
// choice independent of small steps). A capacity that no expert reaches changes nothing.
TEST(FiniteDifference, MixtureOfExpertsWithCapacity) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  nn::ModelConfig cfg = small_config("llama");
  cfg.num_experts = 4;
  cfg.moe_router_topk = 2;
  cfg.moe_ffn_hidden_size = 12;
  cfg.moe_expert_capacity_factor = 0.5;
  cfg.moe_token_drop_policy = "position";
  nn::ParamStore ps(DType::f32);
  nn::Moe moe(ps, "moe", cfg, cfg.num_layers);
  check_module(ps, moe, cfg, [&](const Tensor& x, Activations& a) { return moe.forward(x, 1.0f, a); });

  nn::ModelConfig roomy = cfg, unlimited = cfg;
  roomy.moe_expert_capacity_factor = 100.0;
  unlimited.moe_expert_capacity_factor = 0.0;
  nn::ParamStore pa(DType::f32), pb(DType::f32);
  nn::Moe a(pa, "moe", roomy, cfg.num_layers), b(pb, "moe", unlimited, cfg.num_layers);
  pa.finalize();
  pb.finalize();
  randomize_params(pa);
  randomize_params(pb);
  const Tensor x = random_tensor({kBatch * cfg.seq_length, cfg.hidden_size}, 3);
  Activations sa, sb, sc;
  const Tensor ya = a.forward(x, 1.0f, sa), yb = b.forward(x, 1.0f, sb), yc = moe.forward(x, 1.0f, sc);
  for (int64_t i = 0; i < ya.numel(); ++i) ASSERT_EQ(ya.data<float>()[i], yb.data<float>()[i]);
  EXPECT_GT(std::fabs(dot(yc, yc) - dot(yb, yb)), 1e-3 * dot(yb, yb));  // half the copies dropped
}

TEST_P(ArchFd, TransformerLayer) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  const auto cfg = small_config(GetParam());
  nn::ParamStore ps(DType::f32);
  auto rope = cfg.is_llama() ? std::make_shared<kernels::RopeTable>(cfg.seq_length, cfg.head_dim(), cfg.rotary_base)
                             : nullptr;
  nn::TransformerLayer layer(ps, cfg, 0, rope);
  ps.finalize();
  randomize_params(ps);
  check_gradients(
      ps, random_tensor({kBatch * cfg.seq_length, cfg.hidden_size}, 1),
      [&](const Tensor& x, Activations& a) { return layer.forward(x, kBatch, a); },
      input_then_weights(layer));
}

TEST_P(ArchFd, EmbeddingPositionsAndTiedHead) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  // The whole model's loss: exercises embedding (and positions), every layer, final norm, the
  // fused head + cross-entropy, with tied embeddings, and recompute.
  auto cfg = small_config(GetParam());
  cfg.tie_embeddings = true;
  cfg.recompute = true;
  nn::Model model(cfg);
  randomize_params(model.params());
  const Tensor tokens = token_ids(cfg, 5, 3), targets = token_ids(cfg, 7, 1);
  // L = sum of token losses: the scalar is the model's own loss.
  check_objective_gradients(
      model.params(), [&]() { return model.loss_sum(tokens, targets); },
      [&]() { model.forward_backward(tokens, targets, 1.0f); }, 3e-2);
}

// DeepSeek-V3's model: MLA, a first dense layer then MoE layers with a shared expert and a sigmoid
// router (all experts chosen here, so the objective is smooth), and two multi-token-prediction
// modules sharing the embedding and the head. The scalar is
// the whole objective, the main loss plus mtp_loss_scaling_factor / D x the modules' losses.
TEST(FiniteDifference, DeepSeekV3ModelWithMultiTokenPrediction) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  auto cfg = small_config("llama");
  cfg.arch = "deepseek_v3";
  cfg.num_layers = 2;
  cfg.kv_lora_rank = 8;
  cfg.q_lora_rank = 8;
  cfg.qk_head_dim = 4;
  cfg.qk_pos_emb_head_dim = 4;
  cfg.v_head_dim = 4;
  cfg.num_experts = 4;
  cfg.moe_router_topk = 4;  // every expert chosen: no top-k boundary for a finite step to cross
  cfg.moe_ffn_hidden_size = 8;
  cfg.moe_shared_expert_intermediate_size = 8;
  cfg.moe_router_score_function = "sigmoid";
  cfg.moe_first_dense_layers = 1;
  cfg.mtp_num_layers = 2;
  cfg.mtp_loss_scaling_factor = 0.5;
  nn::Model model(cfg);
  randomize_params(model.params());
  const Tensor tokens = token_ids(cfg, 5, 3), targets = token_ids(cfg, 7, 1);
  auto objective = [&](float scale, bool backward) {
    nn::Activations saved;
    double loss = model.forward(tokens, targets, scale, saved);
    const double mtp = model.take_mtp_loss().first;
    if (backward) model.backward(saved);
    return loss + cfg.mtp_loss_scaling_factor / double(cfg.mtp_num_layers) * mtp;
  };
  check_objective_gradients(
      model.params(), [&]() { return objective(1.0f, false); }, [&]() { objective(1.0f, true); }, 3e-2);
}

INSTANTIATE_TEST_SUITE_P(Archs, ArchFd, ::testing::Values("llama", "gpt2"));

}  // namespace
