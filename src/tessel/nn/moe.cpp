#include "tessel/nn/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tessel/core/profiler.h"
#include "tessel/kernels/cast.h"
#include "tessel/kernels/gemm.h"

namespace tessel::nn {

namespace {
// Keys of what forward keeps for backward (under the layer's prefix).
struct Keys {
  std::string y, scores, chosen, weights, order, counts, outputs, daux;
  explicit Keys(const std::string& p)
      : y(p + ".router_in"), scores(p + ".scores"), chosen(p + ".chosen"), weights(p + ".weights"),
        order(p + ".order"), counts(p + ".counts"), outputs(p + ".expert_out"), daux(p + ".daux") {}
};

Tensor from_vector(const std::vector<int64_t>& v) {
  Tensor t = Tensor::empty({int64_t(v.size())}, DType::i64);
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}
}  // namespace

Moe::Moe(ParamStore& ps, const std::string& prefix, const ModelConfig& cfg, int64_t layer_count)
    : ps_(ps),
      prefix_(prefix),
      d_(cfg.hidden_size),
      seq_(cfg.seq_length),
      balance_(cfg.moe_router_load_balancing_type),
      alpha_(float(cfg.moe_aux_loss_coeff)),
      z_coeff_(float(cfg.moe_z_loss_coeff)),
      gamma_(float(cfg.moe_router_bias_update_rate)),
      use_bias_(cfg.moe_router_enable_expert_bias) {
  rc_.experts = cfg.num_experts;
  rc_.topk = cfg.moe_router_topk;
  rc_.sigmoid = cfg.moe_router_score_function == "sigmoid";
  rc_.normalize = cfg.moe_router_norm_topk_prob;
  rc_.scaling_factor = float(cfg.moe_router_topk_scaling_factor);
  rc_.num_groups = cfg.moe_router_num_groups;
  rc_.group_topk = cfg.moe_router_group_topk;
  router_offset_ = ps.add(prefix + ".gate.weight", {rc_.experts, d_}, Init::normal, float(cfg.init_method_std), true);
  for (int64_t e = 0; e < rc_.experts; ++e)
    experts_.push_back(std::make_unique<Mlp>(ps, prefix + ".experts." + std::to_string(e), cfg, layer_count, nullptr,
                                             cfg.expert_ffn()));
  if (cfg.moe_shared_expert_intermediate_size > 0)
    shared_ = std::make_unique<Mlp>(ps, prefix + ".shared_experts", cfg, layer_count, nullptr,
                                    cfg.moe_shared_expert_intermediate_size);
  bias_.assign(static_cast<size_t>(rc_.experts), 0.0f);
  load_.assign(static_cast<size_t>(rc_.experts), 0);
}

Tensor Moe::forward(const Tensor& y, float grad_scale, Activations& saved) const {
  const Keys key(prefix_);
  const int64_t N = y.size(0), E = rc_.experts, k = rc_.topk;
  const Tensor y32 = y.dtype() == DType::f32 ? y : y.to(DType::f32);
  Tensor logits = Tensor::empty({N, E}, DType::f32), scores = Tensor::empty({N, E}, DType::f32);
  Tensor chosen = Tensor::empty({N, k}, DType::i32), weights = Tensor::empty({N, k}, DType::f32);
  {
    ProfileScope prof("router");
    kernels::matmul(y32, false, ps_.param_at(router_offset_, {E, d_}), true, logits, false);
    kernels::router_forward(rc_, N, logits.data<float>(), use_bias_ ? bias_.data() : nullptr, scores.data<float>(),
                            chosen.data<int32_t>(), weights.data<float>());
  }
  const bool training = grad_scale > 0;  // evaluation: no statistics, no auxiliary losses
  // Auxiliary losses: their gradient with respect to the logits is known now; kept for backward.
  if (training && ((balance_ != "none" && alpha_ > 0) || z_coeff_ > 0)) {
    Tensor dscores = Tensor::zeros({N, E}, DType::f32), daux = Tensor::zeros({N, E}, DType::f32);
    if (balance_ != "none" && alpha_ > 0) {
      // seq_aux_loss: per sequence, weighted like the loss (grad_scale per token x T tokens)
      const int64_t T = balance_ == "seq_aux_loss" ? seq_ : N;
      // Its value enters the objective like the gradient: per sequence x grad_scale x T.
      aux_loss_ += double(grad_scale) * double(T) *
                   kernels::sequence_balance_loss(rc_, N, T, alpha_, scores.data<float>(), chosen.data<int32_t>(),
                                                  grad_scale * float(T), dscores.data<float>());
      kernels::router_scores_backward(rc_, N, scores.data<float>(), dscores.data<float>(), daux.data<float>());
    }
    if (z_coeff_ > 0) {  // z-loss (ST-MoE): coeff x logsumexp(u)^2 per token, weighted like the loss
      for (int64_t t = 0; t < N; ++t) {
        const float* u = logits.data<float>() + t * E;
        const float mx = *std::max_element(u, u + E);
        double sum = 0;
        for (int64_t e = 0; e < E; ++e) sum += std::exp(double(u[e] - mx));
        const double lse = double(mx) + std::log(sum);
        aux_loss_ += double(z_coeff_) * lse * lse * double(grad_scale);
        for (int64_t e = 0; e < E; ++e)
          daux.data<float>()[t * E + e] +=
              float(2.0 * double(z_coeff_) * lse * std::exp(double(u[e]) - lse) * double(grad_scale));
      }
    }
    saved.put(key.daux, daux);
  }
  // Token copies in expert order; each expert runs on its contiguous group.
  std::vector<int64_t> order, counts;
  kernels::expert_order(N, k, E, chosen.data<int32_t>(), order, counts);
  if (training)
    for (int64_t e = 0; e < E; ++e) load_[size_t(e)] += counts[size_t(e)];
  const Tensor yc = y.is_contiguous() ? y : y.clone();
  Tensor x_perm = Tensor::empty({N * k, d_}, y.dtype());
  const size_t row = size_t(d_) * dtype_size(y.dtype());
  for (int64_t p = 0; p < N * k; ++p)
    std::memcpy(static_cast<char*>(x_perm.raw()) + size_t(p) * row,
                static_cast<const char*>(yc.raw()) + size_t(order[size_t(p)] / k) * row, row);
  Tensor outputs = Tensor::empty({N * k, d_}, DType::f32);
  int64_t begin = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = counts[size_t(e)];
    if (n > 0)
      outputs.slice(0, begin, begin + n)
          .copy_from(experts_[size_t(e)]->forward(x_perm.slice(0, begin, begin + n).clone(), saved));
    begin += n;
  }
  // out[t] = sum_j w[t, j] x expert output of copy (t, j)
  Tensor out = shared_ ? shared_->forward(y, saved) : Tensor::zeros({N, d_}, DType::f32);
  {
    ProfileScope prof("moe_combine");
    const float* w = weights.data<float>();
    float* o = out.data<float>();
    const float* src = outputs.data<float>();
    for (int64_t p = 0; p < N * k; ++p) {
      const int64_t c = order[size_t(p)], t = c / k;
      for (int64_t i = 0; i < d_; ++i) o[t * d_ + i] += w[c] * src[p * d_ + i];
    }
  }
  saved.put(key.y, y32);
  saved.put(key.scores, scores);
  saved.put(key.chosen, chosen);
  saved.put(key.weights, weights);
  saved.put(key.order, from_vector(order));
  saved.put(key.counts, from_vector(counts));
  saved.put(key.outputs, outputs);
  return out;
}

Tensor Moe::backward_input(const Tensor& dout, Activations& saved) const {
  const Keys key(prefix_);
  const Tensor y32 = saved.get(key.y), scores = saved.get(key.scores), chosen = saved.get(key.chosen);
  const Tensor weights = saved.get(key.weights), order = saved.get(key.order), counts = saved.get(key.counts);
  const Tensor outputs = saved.get(key.outputs);
  const int64_t N = dout.size(0), E = rc_.experts, k = rc_.topk;
  const int64_t* ord = order.data<int64_t>();
  // Gradients of the gate weights and of each copy's expert output.
  Tensor dweights = Tensor::zeros({N, k}, DType::f32), dcopy = Tensor::empty({N * k, d_}, DType::f32);
  for (int64_t p = 0; p < N * k; ++p) {
    const int64_t c = ord[p], t = c / k;
    const float* g = dout.data<float>() + t * d_;
    const float* o = outputs.data<float>() + p * d_;
    float* dc = dcopy.data<float>() + p * d_;
    double dot = 0;
    for (int64_t i = 0; i < d_; ++i) {
      dot += double(g[i]) * double(o[i]);
      dc[i] = weights.data<float>()[c] * g[i];
    }
    dweights.data<float>()[c] = float(dot);
  }
  Tensor dy = shared_ ? shared_->backward_input(dout, saved) : Tensor::zeros({N, d_}, DType::f32);
  int64_t begin = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = counts.data<int64_t>()[e];
    if (n > 0) {
      const Tensor dx = experts_[size_t(e)]->backward_input(dcopy.slice(0, begin, begin + n).clone(), saved);
      for (int64_t p = begin; p < begin + n; ++p) {
        const int64_t t = ord[p] / k;
        for (int64_t i = 0; i < d_; ++i) dy.data<float>()[t * d_ + i] += dx.data<float>()[(p - begin) * d_ + i];
      }
    }
    begin += n;
  }
  // Router: gate-weight gradients through the selection's affinities, plus the auxiliary losses'.
  Tensor dscores = Tensor::zeros({N, E}, DType::f32), dlogits = Tensor::empty({N, E}, DType::f32);
  kernels::router_weights_backward(rc_, N, scores.data<float>(), chosen.data<int32_t>(), dweights.data<float>(),
                                   dscores.data<float>());
  kernels::router_scores_backward(rc_, N, scores.data<float>(), dscores.data<float>(), dlogits.data<float>());
  if (saved.has(key.daux)) {
    kernels::add(dlogits.numel(), dlogits.data<float>(), saved.get(key.daux).data<float>(), dlogits.data<float>());
    saved.erase(key.daux);
  }
  kernels::matmul(dlogits, false, ps_.param_at(router_offset_, {E, d_}), false, dy, true);
  for (const auto& k2 : {key.scores, key.chosen, key.weights, key.order, key.outputs}) saved.erase(k2);
  saved.put(key.daux, dlogits);  // for the router's weight gradient
  return dy;
}

void Moe::backward_weight(Activations& saved) const {
  const Keys key(prefix_);
  const Tensor counts = saved.get(key.counts);
  for (int64_t e = 0; e < rc_.experts; ++e)
    if (counts.data<int64_t>()[e] > 0) experts_[size_t(e)]->backward_weight(saved);
  if (shared_) shared_->backward_weight(saved);
  kernels::matmul(saved.get(key.daux), true, saved.get(key.y), false, ps_.grad_at(router_offset_, {rc_.experts, d_}),
                  true);
  for (const auto& k2 : {key.counts, key.daux, key.y}) saved.erase(k2);
}

double Moe::end_step(const std::vector<comm::Communicator*>& groups) {
  for (comm::Communicator* g : groups)
    if (g && g->size() > 1) g->all_reduce(load_.data(), int64_t(load_.size()), DType::i64, comm::ReduceOp::sum);
  int64_t total = 0, mx = 0;
  for (int64_t l : load_) {
    total += l;
    mx = std::max(mx, l);
  }
  const double mean = double(total) / double(load_.size());
  if (use_bias_)  // auxiliary-loss-free balancing: overloaded experts become less attractive
    for (size_t e = 0; e < load_.size(); ++e)
      bias_[e] += double(load_[e]) > mean ? -gamma_ : double(load_[e]) < mean ? gamma_ : 0.0f;
  std::fill(load_.begin(), load_.end(), 0);
  return mean > 0 ? double(mx) / mean : 0.0;
}

double Moe::take_aux_loss() {
  const double a = aux_loss_;
  aux_loss_ = 0;
  return a;
}

}  // namespace tessel::nn
