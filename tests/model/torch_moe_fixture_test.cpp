// Whole-model checks of Mixture of Experts, multi-head latent attention and multi-token prediction
// against fixtures written by tests/fixtures/make_moe_fixtures.py (PyTorch, float64): logits, the
// main / MTP / auxiliary losses, every parameter gradient, the expert loads and the expert-bias
// update. The objective is the one tessel's gradients follow (fixtures README): mean main loss +
// mtp_loss_scaling_factor / D x the modules' summed losses / (B x T) + every MoE layer's balance and
// z losses. With the sequence-wise balance loss (or none) that objective is the same whether the
// batch runs whole or as 2 micro-batches, so those fixtures run both ways; the global "aux_loss"
// treats each micro-batch as one sequence, so the Mixtral fixture runs whole only.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "model/fixture_support.h"
#include "support/host_access.h"
#include "tessel/ckpt/safetensors.h"
#include "tessel/nn/model.h"

using namespace tessel;

namespace {

// fp32 against the float64 reference, relative to each tensor's max |value| (the 1e-4).
constexpr double kTol = 1e-4;

using fixture::max_abs;
using fixture::rel_err;

double rel(double got, double want) { return std::fabs(got - want) / std::max(std::fabs(want), 1e-30); }

nn::ModelConfig config_from(const ckpt::SafetensorsFile& f) {
  auto s = [&](const char* k) { return f.metadata.at(k); };
  auto i = [&](const char* k) { return int64_t(std::stoll(s(k))); };
  auto d = [&](const char* k) { return std::stod(s(k)); };
  auto b = [&](const char* k) { return s(k) == "true"; };
  nn::ModelConfig c;
  c.arch = s("arch");
  c.num_layers = i("num_layers");
  c.hidden_size = i("hidden_size");
  c.num_attention_heads = i("num_attention_heads");
  c.num_query_groups = i("num_query_groups");
  c.ffn_hidden_size = i("ffn_hidden_size");
  c.vocab_size = i("vocab_size");
  c.seq_length = i("seq_length");
  c.norm_epsilon = d("norm_epsilon");
  c.rotary_base = d("rotary_base");
  c.tie_embeddings = b("tie_embeddings");
  if (c.arch == "deepseek_v3") {
    c.q_lora_rank = i("q_lora_rank");
    c.kv_lora_rank = i("kv_lora_rank");
    c.qk_head_dim = i("qk_head_dim");
    c.qk_pos_emb_head_dim = i("qk_pos_emb_head_dim");
    c.v_head_dim = i("v_head_dim");
  }
  c.num_experts = i("num_experts");
  c.moe_router_topk = i("moe_router_topk");
  c.moe_ffn_hidden_size = i("moe_ffn_hidden_size");
  c.moe_shared_expert_intermediate_size = i("moe_shared_expert_intermediate_size");
  c.moe_first_dense_layers = i("moe_first_dense_layers");
  c.moe_router_score_function = s("moe_router_score_function");
  c.moe_router_norm_topk_prob = b("moe_router_norm_topk_prob");
  c.moe_router_topk_scaling_factor = d("moe_router_topk_scaling_factor");
  c.moe_router_num_groups = i("moe_router_num_groups");
  c.moe_router_group_topk = i("moe_router_group_topk");
  c.moe_router_enable_expert_bias = b("moe_router_enable_expert_bias");
  c.moe_router_bias_update_rate = d("moe_router_bias_update_rate");
  c.moe_router_load_balancing_type = s("moe_router_load_balancing_type");
  c.moe_aux_loss_coeff = d("moe_aux_loss_coeff");
  c.moe_z_loss_coeff = d("moe_z_loss_coeff");
  c.mtp_num_layers = i("mtp_num_layers");
  c.mtp_loss_scaling_factor = d("mtp_loss_scaling_factor");
  c.compute = DType::f32;
  return c;
}

using fixture::load_params;

// The fixture's tensors whose name starts with `prefix`, the prefix removed.
std::vector<std::pair<std::string, Tensor>> with_prefix(const ckpt::SafetensorsFile& f, const std::string& prefix) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [name, t] : f.tensors)
    if (name.rfind(prefix, 0) == 0) out.emplace_back(name.substr(prefix.size()), t);
  return out;
}

void load_expert_bias(nn::Model& model, const ckpt::SafetensorsFile& f) {
  const auto state = with_prefix(f, "state.");
  const auto missing = model.load_state_tensors(state);
  ASSERT_TRUE(missing.empty()) << "not loaded: " << missing.front();
  ASSERT_EQ(model.state_tensors().size(), state.size()) << "the model holds expert biases the fixture has not";
}

Tensor rows(const Tensor& t, int64_t b0, int64_t b1) { return t.slice(0, b0, b1).clone(); }

struct Case {
  std::string file;
  bool recompute;  // full-layer activation recompute: MoE layers run their forward twice
};

class TorchMoeFixture : public ::testing::TestWithParam<Case> {};

TEST_P(TorchMoeFixture, LossesGradientsAndRouting) {
  const auto f = ckpt::read_safetensors(std::string(TESSEL_FIXTURE_DIR) + "/" + GetParam().file);
  nn::ModelConfig cfg = config_from(f);
  cfg.recompute = GetParam().recompute;
  nn::Model model(cfg);
  load_params(model, f);
  load_expert_bias(model, f);

  const Tensor& tokens = f.get("tokens");
  const Tensor& targets = f.get("targets");
  const int64_t B = tokens.size(0), T = tokens.size(1), D = cfg.mtp_num_layers;

  // Logits of the main head (evaluation: no statistics, no auxiliary losses).
  const double logits_err = rel_err(model.logits(tokens), f.get("logits").reshape({B * T, cfg.vocab_size}));
  EXPECT_LT(logits_err, kTol);

  // Reference values. aux_loss holds every MoE layer's balance + z loss, the main model's layers
  // first, then the MTP modules'; tessel reports (moe_take_aux_loss) their sum.
  const Tensor& aux_ref = f.get("aux_loss");
  double aux_total_ref = 0;
  for (int64_t j = 0; j < aux_ref.numel(); ++j) aux_total_ref += tessel::testing::host_at<float>(aux_ref, j);
  double mtp_sum_ref = 0;
  int64_t mtp_count_ref = 0;
  for (int64_t k = 1; k <= D; ++k) {
    mtp_sum_ref += double(tessel::testing::host_at<float>(f.get("mtp_loss"), k - 1)) * double(B * (T - k));
    mtp_count_ref += B * (T - k);
  }

  const bool split_ok = cfg.moe_router_load_balancing_type != "aux_loss";
  for (const int64_t micro : split_ok ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{1}) {
    SCOPED_TRACE(std::to_string(micro) + " micro-batch(es)");
    load_expert_bias(model, f);  // end_step below moved it
    model.params().zero_grads();
    const float scale = 1.0f / float(B * T);
    double main_sum = 0;
    for (int64_t b = 0; b < B; b += B / micro)
      main_sum += model.forward_backward(rows(tokens, b, b + B / micro), rows(targets, b, b + B / micro), scale);
    const auto [mtp_sum, mtp_count] = model.take_mtp_loss();
    const double aux = model.moe_take_aux_loss();

    const double main_err = rel(main_sum / double(B * T), f.get("main_loss").item());
    EXPECT_LT(main_err, kTol);
    double mtp_err = 0;
    if (D > 0) {
      EXPECT_EQ(mtp_count, mtp_count_ref);
      mtp_err = rel(mtp_sum, mtp_sum_ref);
      EXPECT_LT(mtp_err, kTol);
    }
    const double aux_err = rel(aux, aux_total_ref);
    EXPECT_LT(aux_err, kTol) << "reported auxiliary loss " << aux << " vs " << aux_total_ref;
    // The whole objective, from tessel's parts.
    const double objective = main_sum / double(B * T) +
                             (D > 0 ? cfg.mtp_loss_scaling_factor / double(D) * mtp_sum / double(B * T) : 0.0) + aux;
    const double loss_err = rel(objective, f.get("loss").item());
    EXPECT_LT(loss_err, kTol) << objective << " vs " << f.get("loss").item();

    double worst_grad = 0;
    std::string worst_name;
    for (const auto& spec : model.params().specs()) {
      const double e = rel_err(model.params().grad(spec.name), f.get("grad." + spec.name));
      if (e > worst_grad) {
        worst_grad = e;
        worst_name = spec.name;
      }
      EXPECT_LT(e, kTol) << spec.name;
    }

    // Routing: tokens per expert of each MoE layer, the MTP modules' (index num_layers + k)
    // included (max / mean), then the expert bias moved by -+gamma for experts above / below the
    // mean load.
    const std::vector<double> ratio = model.moe_end_step({});
    ASSERT_EQ(int64_t(ratio.size()), cfg.num_layers + D);
    for (int64_t l = 0; l < cfg.num_layers + D; ++l) {
      if (!cfg.is_moe_layer(l)) continue;
      const Tensor& load = f.get("expert_load.model.layers." + std::to_string(l) + ".mlp");
      int64_t total = 0, mx = 0;
      for (int64_t e = 0; e < load.numel(); ++e) {
        total += tessel::testing::host_at<int64_t>(load, e);
        mx = std::max(mx, tessel::testing::host_at<int64_t>(load, e));
      }
      EXPECT_NEAR(ratio[size_t(l)], double(mx) * double(load.numel()) / double(total), 1e-12) << "layer " << l;
    }
    const auto after = model.state_tensors();
    const auto want_after = with_prefix(f, "state_after.");
    ASSERT_EQ(after.size(), want_after.size());
    double bias_err = 0;
    for (const auto& entry : after) {
      const auto& name = entry.first;  // a plain reference: clang 14 cannot capture a structured binding
      const auto& t = entry.second;
      const auto it = std::find_if(want_after.begin(), want_after.end(), [&](const auto& p) { return p.first == name; });
      ASSERT_NE(it, want_after.end()) << name;
      for (int64_t e = 0; e < t.numel(); ++e)
        bias_err = std::max(bias_err, double(std::fabs(tessel::testing::host_at<float>(t, e) - tessel::testing::host_at<float>(it->second, e))));
    }
    EXPECT_LT(bias_err, 1e-7);

    std::printf("[ errors   ] %s, %lld micro-batch(es): logits %.2e, main loss %.2e, mtp loss %.2e, aux loss %.2e, "
                "objective %.2e, worst grad %.2e (%s), expert bias after the step %.1e\n",
                GetParam().file.c_str(), static_cast<long long>(micro), logits_err, main_err, mtp_err, aux_err, loss_err,
                worst_grad, worst_name.c_str(), bias_err);
  }
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.file.substr(0, info.param.file.find('.')) + (info.param.recompute ? "_recompute" : "");
}

INSTANTIATE_TEST_SUITE_P(Models, TorchMoeFixture,
                         ::testing::Values(Case{"deepseek_tiny.safetensors", false},
                                           Case{"deepseek_tiny.safetensors", true},
                                           Case{"deepseek_qproj_mtp2.safetensors", false},
                                           Case{"mixtral_tiny.safetensors", false},
                                           Case{"mixtral_tiny.safetensors", true}),
                         case_name);

}  // namespace
