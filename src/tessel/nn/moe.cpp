#include "tessel/nn/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "tessel/core/paired_tasks.h"
#include "tessel/core/profiler.h"
#include "tessel/core/transfer_spans.h"
#include "tessel/kernels/cast.h"
#include "tessel/kernels/gemm.h"

namespace tessel::nn {

namespace {
// Keys of what forward keeps for backward (under the layer's prefix).
struct Keys {
  std::string y, scores, chosen, weights, order, tokens, counts, outputs, daux, recv_counts, local_counts;
  explicit Keys(const std::string& p)
      : y(p + ".router_in"), scores(p + ".scores"), chosen(p + ".chosen"), weights(p + ".weights"),
        order(p + ".order"), tokens(p + ".tokens"), counts(p + ".counts"), outputs(p + ".expert_out"), daux(p + ".daux"),
        recv_counts(p + ".recv_counts"), local_counts(p + ".local_counts") {}
};

// Host indices copied to `device` as an i64 tensor (nothing to copy on meta).
Tensor to_device(const std::vector<int64_t>& v, Device device) {
  Tensor t = Tensor::empty({int64_t(v.size())}, DType::i64, device);
  const DeviceAccessScope copy_to_device;
  if (!t.is_meta()) std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}

thread_local MoeRoutingTrace* t_trace = nullptr;
}  // namespace

const std::vector<int32_t>& MoeRoutingTrace::next(const std::string& block, int64_t copies) {
  TESSEL_CHECK(cursor_ < calls_.size(), "{}: the routing recording holds {} forwards, this is forward {}", block,
               calls_.size(), cursor_ + 1);
  const std::vector<int32_t>& r = calls_[cursor_++];
  TESSEL_CHECK(int64_t(r.size()) == copies, "{}: recorded forward {} routed {} token copies, this one has {}", block,
               cursor_, r.size(), copies);
  return r;
}

MoeRoutingTraceScope::MoeRoutingTraceScope(MoeRoutingTrace* trace) : previous_(t_trace) { t_trace = trace; }
MoeRoutingTraceScope::~MoeRoutingTraceScope() { t_trace = previous_; }
MoeRoutingTrace* current_moe_routing_trace() { return t_trace; }

namespace {
thread_local double t_skew = 1.0;
}

MetaRoutingSkewScope::MetaRoutingSkewScope(double skew) : previous_(t_skew) {
  TESSEL_CHECK(std::isfinite(skew) && skew >= 1.0, "expert skew must be a number >= 1 (1: balanced routing), got {}",
               skew);
  t_skew = skew;
}
MetaRoutingSkewScope::~MetaRoutingSkewScope() { t_skew = previous_; }
double current_meta_routing_skew() { return t_skew; }

std::vector<int32_t> meta_routing(int64_t N, int64_t k, int64_t E, double skew) {
  std::vector<int32_t> routed(size_t(N * k));
  if (skew <= 1.0) {
    for (int64_t c = 0; c < N * k; ++c) routed[size_t(c)] = int32_t(c % E);  // balanced
    return routed;
  }
  TESSEL_CHECK(skew <= double(E) / double(k) && E > k,
               "expert skew {} is more than {} experts with top-{} routing allow: expert 0 takes at most one copy of "
               "each token, {} = E / k times the mean share", skew, E, k, double(E) / double(k));
  // Expert 0 takes copy 0 of the first `hot` tokens; every other copy goes round robin over experts
  // 1 .. E-1, k consecutive ones per token (distinct, as E - 1 >= k).
  const int64_t hot = std::min<int64_t>(N, std::llround(skew * double(N * k) / double(E)));
  int64_t next = 0;
  for (int64_t t = 0; t < N; ++t)
    for (int64_t j = 0; j < k; ++j) {
      int32_t& e = routed[size_t(t * k + j)];
      if (j == 0 && t < hot) {
        e = 0;
      } else {
        e = int32_t(1 + next % (E - 1));
        ++next;
      }
    }
  return routed;
}

std::vector<int64_t> meta_balanced_counts(int64_t N, int64_t k, int64_t E) {
  std::vector<int64_t> counts(size_t(E), (N * k) / E);
  for (int64_t e = 0; e < (N * k) % E; ++e) ++counts[size_t(e)];
  return counts;
}

Moe::Moe(ParamStore& ps, const std::string& prefix, const ModelConfig& cfg, int64_t layer_count,
         comm::Communicator* ep, comm::Communicator* tp, comm::Communicator* cp)
    : ps_(&ps),
      prefix_(prefix),
      d_(cfg.hidden_size),
      seq_(cfg.seq_length),
      balance_(cfg.moe_router_load_balancing_type),
      alpha_(float(cfg.moe_aux_loss_coeff)),
      z_coeff_(float(cfg.moe_z_loss_coeff)),
      gamma_(float(cfg.moe_router_bias_update_rate)),
      use_bias_(cfg.moe_router_enable_expert_bias),
      capacity_factor_(cfg.moe_expert_capacity_factor),
      drop_by_probs_(cfg.moe_token_drop_policy == "probs") {
  rc_.experts = cfg.num_experts;
  rc_.topk = cfg.moe_router_topk;
  rc_.sigmoid = cfg.moe_router_score_function == "sigmoid";
  rc_.normalize = cfg.moe_router_norm_topk_prob;
  rc_.scaling_factor = float(cfg.moe_router_topk_scaling_factor);
  rc_.num_groups = cfg.moe_router_num_groups;
  rc_.group_topk = cfg.moe_router_group_topk;
  router_offset_ = ps.add(prefix + ".gate.weight", {rc_.experts, d_}, Init::normal, float(cfg.init_method_std), true);
  ps.mark_f32_compute(router_offset_);  // routing scores are an fp32 GEMM
  ep_ = ep && ep->size() > 1 ? ep : nullptr;
  tp = tp && tp->size() > 1 ? tp : nullptr;
  sp_ = cfg.sequence_parallel ? tp : nullptr;
  etp_ = cfg.expert_tensor_parallel ? tp : nullptr;
  cp_ = cp && cp->size() > 1 ? cp : nullptr;
  const int64_t n = ep_ ? ep_->size() : 1;
  TESSEL_CHECK(rc_.experts % n == 0, "expert_model_parallel_size {} must divide model.num_experts {}", n, rc_.experts);
  local_ = rc_.experts / n;
  first_ = ep_ ? local_ * ep_->rank() : 0;
  const int64_t experts_begin = ps.numel();
  ModelConfig routed = cfg;  // routed experts take whole row sets (gathered here under sequence parallelism)
  routed.sequence_parallel = false;
  for (int64_t e = first_; e < first_ + local_; ++e)
    experts_.push_back(std::make_unique<Mlp>(ps, prefix + ".experts." + std::to_string(e), routed, layer_count, etp_,
                                             cfg.expert_ffn()));
  if (ep_) ps.mark_expert_range(experts_begin, ps.numel());
  if (cfg.moe_shared_expert_intermediate_size > 0)
    shared_ = std::make_unique<Mlp>(ps, prefix + ".shared_experts", cfg, layer_count, etp_,
                                    cfg.moe_shared_expert_intermediate_size);
  bias_.assign(static_cast<size_t>(rc_.experts), 0.0f);
  load_.assign(static_cast<size_t>(rc_.experts), 0);
}

double Moe::balance_loss(const Tensor& scores, const Tensor& chosen, float grad_scale, const Tensor& dscores) const {
  const int64_t N = scores.size(0);
  const int64_t sp = sp_ ? sp_->size() : 1, cp = cp_ ? cp_->size() : 1;
  const int64_t rows = N * sp, first = sp_ ? N * sp_->rank() : 0;  // this context-parallel rank's rows
  const bool per_sequence = balance_ == "seq_aux_loss";               // else the micro-batch as one
  const int64_t local_seq = seq_ / cp;                                 // a sequence's rows on this rank
  const int64_t T = per_sequence ? seq_ : rows * cp, S = per_sequence ? rows / local_seq : 1;
  Tensor seq_of_row;
  if (scores.is_meta()) {  // nothing to copy: the indices' shape is what the kernels record
    seq_of_row = Tensor::empty({N}, DType::i64, scores.device());
  } else {
    std::vector<int64_t> row_seq(static_cast<size_t>(N), 0);
    if (per_sequence)
      for (int64_t t = 0; t < N; ++t) row_seq[size_t(t)] = (first + t) / local_seq;
    seq_of_row = to_device(row_seq, scores.device());
  }
  const Tensor counts = Tensor::zeros({S * rc_.experts}, DType::f32, scores.device());
  kernels::balance_counts(rc_, seq_of_row, chosen, counts);
  for (comm::Communicator* g : {sp_, cp_})
    if (g) g->all_reduce(counts.device_ptr(), counts.numel(), DType::f32, comm::ReduceOp::sum);
  // Weighted like the loss (grad_scale per token x T tokens per sequence), value and gradient alike.
  return double(grad_scale) * double(T) *
         kernels::balance_loss_rows(rc_, seq_of_row, T, alpha_, scores, counts, grad_scale * float(T), dscores);
}

std::vector<int32_t> Moe::host_routing(const Tensor& chosen, const Tensor& weights, bool count) {
  const int64_t N = chosen.size(0), E = rc_.experts, k = rc_.topk;
  MoeRoutingTrace* trace = current_moe_routing_trace();
  std::vector<int32_t> routed;
  bool final = false;  // a replayed routing is after capacity dropping already
  if (chosen.is_meta()) {
    if (trace && trace->mode() == MoeRoutingTrace::Mode::replay) {
      routed = trace->next(prefix_, N * k);
      final = true;
    } else {
      routed = meta_routing(N, k, E, current_meta_routing_skew());
    }
  } else {
    const DeviceAccessScope copy_to_host;
    const int32_t* p = chosen.data<int32_t>();  // the routing's one copy to the host
    routed.assign(p, p + N * k);
  }
  if (count)
    for (int32_t e : routed)
      if (e < E) ++load_[size_t(e)];  // the router's demand, copies dropped below included
  if (capacity_factor_ > 0 && !final) {
    // "probs" dropping needs the gate weights on the host too (meta: none; ties keep token order).
    std::vector<float> w(size_t(N * k), 0.0f);
    if (drop_by_probs_ && !weights.is_meta()) {
      const DeviceAccessScope copy_to_host;
      std::copy_n(weights.data<float>(), N * k, w.data());
    }
    drop_over_capacity(N, w.data(), routed);
  }
  if (trace && trace->mode() == MoeRoutingTrace::Mode::record && !chosen.is_meta()) trace->add(routed);
  return routed;
}

void Moe::check_same_routing(const std::vector<int64_t>& counts) const {
  // [counts, -counts] reduced with max gives each count's max and -min over the group.
  std::vector<int64_t> both(counts);
  for (int64_t c : counts) both.push_back(-c);
  etp_->all_reduce(both.data(), int64_t(both.size()), DType::i64, comm::ReduceOp::max);
  for (size_t e = 0; e < counts.size(); ++e)
    TESSEL_CHECK(both[e] == -both[e + counts.size()],
                 "{}: expert {} got between {} and {} tokens on the tensor-parallel ranks, which must route the same "
                 "rows alike (their split experts run collectives together)", prefix_, e, -both[e + counts.size()],
                 both[e]);
}

Tensor Moe::forward(const LinearInput& y, float grad_scale, Activations& saved, bool recomputing) {
  TESSEL_CHECK(!y.quantized(), "a Mixture-of-Experts block takes its input unquantized (the router reads it)");
  return forward(y.x, grad_scale, saved, recomputing);
}

Tensor Moe::forward(const Tensor& y, float grad_scale, Activations& saved, bool recomputing) {
  const Keys key(prefix_);
  const int64_t N = y.size(0), E = rc_.experts, k = rc_.topk;
  const Device dev = y.device();
  // The router reads its input in fp32, widened by the cast kernel: the host conversion
  // (Tensor::to) it replaces ran one thread through doubles, about 5% of a mixtral-tiny step.
  Tensor y32 = y;
  if (y.dtype() != DType::f32) {
    y32 = Tensor::empty(y.shape(), DType::f32, dev);
    kernels::cast(y.is_contiguous() ? y : y.clone(), y32);
  }
  Tensor logits = Tensor::empty({N, E}, DType::f32, dev), scores = Tensor::empty({N, E}, DType::f32, dev);
  Tensor chosen = Tensor::empty({N, k}, DType::i32, dev), weights = Tensor::empty({N, k}, DType::f32, dev);
  {
    ProfileScope prof("router");
    kernels::matmul(y32, false, ps_->f32_at(router_offset_, {E, d_}), true, logits, false);
    kernels::router_forward(rc_, logits, use_bias_ ? bias_.data() : nullptr, scores, chosen, weights);
  }
  const bool training = grad_scale > 0;  // evaluation: no statistics, no auxiliary losses
  // Recompute (model.recompute) runs the forward a second time to rebuild what backward needs: the
  // statistics and loss values were counted by the first run.
  const bool count = training && !recomputing;
  double aux = 0;
  // Auxiliary losses: their gradient with respect to the logits is known now; kept for backward.
  if (training && ((balance_ != "none" && alpha_ > 0) || z_coeff_ > 0)) {
    Tensor dscores = Tensor::zeros({N, E}, DType::f32, dev), daux = Tensor::zeros({N, E}, DType::f32, dev);
    if (balance_ != "none" && alpha_ > 0) {
      aux += balance_loss(scores, chosen, grad_scale, dscores);
      kernels::router_scores_backward(rc_, scores, dscores, daux);
    }
    if (z_coeff_ > 0) aux += kernels::router_z_loss(logits, z_coeff_, grad_scale, daux);
    saved.put(key.daux, daux);
  }
  if (count) aux_loss_ += aux;
  // Token copies in expert order; each expert runs on its contiguous group. With a capacity factor the
  // copies an expert cannot take go to a last bucket, E, that no expert runs (their output is zero).
  std::vector<int64_t> order, counts;
  const MoeRoutingTrace* trace = current_moe_routing_trace();
  if (y.is_meta() && current_meta_routing_skew() <= 1.0 && capacity_factor_ <= 0 &&
      !(trace && trace->mode() == MoeRoutingTrace::Mode::replay)) {
    counts = meta_balanced_counts(N, k, E);
    counts.push_back(0);  // nothing dropped
    if (count)
      for (int64_t e = 0; e < E; ++e) load_[size_t(e)] += counts[size_t(e)];
  } else if (y.is_meta()) {  // only the groups' sizes matter where nothing is copied: counted in one pass
    counts.assign(size_t(E + 1), 0);
    for (const int32_t e : host_routing(chosen, weights, count)) ++counts[size_t(e)];
  } else {
    const std::vector<int32_t> routed = host_routing(chosen, weights, count);
    kernels::expert_order(N, k, E + 1, routed.data(), order, counts);
  }
  counts.pop_back();  // the dropped copies sit after every expert's group
  if (etp_ && !sp_) check_same_routing(counts);
  int64_t kept = 0;
  for (int64_t c : counts) kept += c;
  Tensor copies, tokens;  // [kept]: each copy's index t * k + j in expert order, and its token t
  if (y.is_meta()) {
    copies = Tensor::empty({kept}, DType::i64, dev);
    tokens = Tensor::empty({kept}, DType::i64, dev);
  } else {
    order.resize(size_t(kept));  // the copies the experts run, in expert order
    std::vector<int64_t> token_of(order.size());
    for (size_t p = 0; p < order.size(); ++p) token_of[p] = order[p] / k;
    copies = to_device(order, dev);
    tokens = to_device(token_of, dev);
  }
  const Tensor yc = y.is_contiguous() ? y : y.clone();
  Tensor x_perm = Tensor::empty({kept, d_}, y.dtype(), dev);
  kernels::gather_rows(yc, tokens, x_perm);
  Tensor outputs;
  if (ep_) {  // to the experts' ranks, through the local experts, and back in x_perm's order
    std::vector<int64_t> recv_counts;
    const Tensor mine = dispatch(x_perm, counts, recv_counts);
    std::vector<int64_t> per_expert(static_cast<size_t>(local_), 0);
    for (size_t i = 0; i < recv_counts.size(); ++i) per_expert[i % size_t(local_)] += recv_counts[i];
    outputs = combine(run_experts(mine, per_expert, saved), counts, recv_counts);
    saved.put_host(key.recv_counts, std::move(recv_counts));
  } else {
    outputs = run_experts(x_perm, counts, saved);
  }
  // out[t] = sum_j w[t, j] x expert output of copy (t, j)
  Tensor out = shared_ ? shared_->forward(y, saved) : Tensor::zeros({N, d_}, DType::f32, dev);
  {
    ProfileScope prof("moe_combine");
    kernels::moe_weighted_sum(outputs, copies, weights, out);
  }
  saved.put(key.y, y32);
  saved.put(key.scores, scores);
  saved.put(key.chosen, chosen);
  saved.put(key.weights, weights);
  saved.put(key.order, copies);
  saved.put(key.tokens, tokens);
  saved.put_host(key.counts, std::move(counts));
  saved.put(key.outputs, outputs);
  return out;
}

Tensor Moe::backward_input(const Tensor& dout, Activations& saved) {
  const Keys key(prefix_);
  const Tensor y32 = saved.get(key.y), scores = saved.get(key.scores), chosen = saved.get(key.chosen);
  const Tensor weights = saved.get(key.weights), copies = saved.get(key.order), tokens = saved.get(key.tokens);
  const Tensor outputs = saved.get(key.outputs);
  const std::vector<int64_t> cnt = saved.host(key.counts);
  const int64_t N = dout.size(0), E = rc_.experts, k = rc_.topk;
  const Device dev = dout.device();
  // Gradients of the gate weights and of each copy's expert output (the copies an expert ran; the
  // dropped ones had zero output and get zero gradients).
  Tensor dweights = Tensor::zeros({N, k}, DType::f32, dev), dcopy = Tensor::empty({copies.numel(), d_}, DType::f32, dev);
  kernels::moe_weighted_sum_backward(dout, outputs, copies, weights, dweights, dcopy);
  Tensor dy = shared_ ? shared_->backward_input(dout, saved) : Tensor::zeros({N, d_}, DType::f32, dev);
  Tensor dx_perm;
  if (ep_) {  // the same two exchanges as forward, for the gradients
    const std::vector<int64_t> recv_counts = saved.host(key.recv_counts);
    std::vector<int64_t> again;
    std::vector<int64_t> per_expert(static_cast<size_t>(local_), 0);
    for (size_t i = 0; i < recv_counts.size(); ++i) per_expert[i % size_t(local_)] += recv_counts[i];
    dx_perm = combine(experts_backward(dispatch(dcopy, cnt, again), per_expert, saved), cnt, recv_counts);
    saved.erase_host(key.recv_counts);
  } else {
    dx_perm = experts_backward(dcopy, cnt, saved);
  }
  kernels::scatter_add_rows(dx_perm, tokens, dy);
  // Router: gate-weight gradients through the selection's affinities, plus the auxiliary losses'.
  Tensor dscores = Tensor::zeros({N, E}, DType::f32, dev), dlogits = Tensor::empty({N, E}, DType::f32, dev);
  kernels::router_weights_backward(rc_, scores, chosen, dweights, dscores);
  kernels::router_scores_backward(rc_, scores, dscores, dlogits);
  if (saved.has(key.daux)) {
    kernels::add(dlogits, saved.get(key.daux), dlogits);
    saved.erase(key.daux);
  }
  kernels::matmul(dlogits, false, ps_->f32_at(router_offset_, {E, d_}), false, dy, true);
  for (const auto& k2 : {key.scores, key.chosen, key.weights, key.order, key.tokens, key.outputs}) saved.erase(k2);
  saved.put(key.daux, dlogits);  // for the router's weight gradient
  return dy;
}

void Moe::backward_weight(Activations& saved) {
  const Keys key(prefix_);
  const std::vector<int64_t>& lc = saved.host(key.local_counts);
  for_experts(lc, saved.get(key.y).is_meta(), saved, [&](size_t e) { experts_[e]->backward_weight(saved); });
  if (shared_) shared_->backward_weight(saved);
  kernels::matmul(saved.get(key.daux), true, saved.get(key.y), false, ps_->grad_at(router_offset_, {rc_.experts, d_}),
                  true);
  for (const auto& k2 : {key.daux, key.y}) saved.erase(k2);
  for (const auto& k2 : {key.counts, key.local_counts}) saved.erase_host(k2);
}

void Moe::for_experts(const std::vector<int64_t>& counts, bool meta, Activations& saved,
                      const std::function<void(size_t)>& fn) {
  const AlikeCalls alike{&saved, &meta_cached_, [&](int64_t e) { return experts_[size_t(e)]->cached_bytes(); }, {etp_}};
  for_each_sized(counts, meta, alike, [&](int64_t e) { fn(size_t(e)); });
}

namespace {
// Where each expert's contiguous group of rows begins (counts[e] rows each).
std::vector<int64_t> group_starts(const std::vector<int64_t>& counts) {
  std::vector<int64_t> begin(counts.size(), 0);
  for (size_t e = 1; e < counts.size(); ++e) begin[e] = begin[e - 1] + counts[e - 1];
  return begin;
}
}  // namespace

Tensor Moe::run_experts(const Tensor& x, const std::vector<int64_t>& counts, Activations& saved) {
  // counts: rows per local expert (without expert parallelism: per expert, local_ == E)
  std::vector<int64_t> ran;  // rows each expert ran (all tensor-parallel ranks' when gathered)
  Tensor out = over_gathered(
      x, counts, saved, [&](size_t e, const Tensor& rows) { return experts_[e]->forward(rows, saved); }, &ran);
  saved.put_host(Keys(prefix_).local_counts, std::move(ran));
  return out;
}

Tensor Moe::experts_backward(const Tensor& dy, const std::vector<int64_t>& counts, Activations& saved) {
  return over_gathered(dy, counts, saved,
                       [&](size_t e, const Tensor& rows) { return experts_[e]->backward_input(rows, saved); });
}

Tensor Moe::over_gathered(const Tensor& x, const std::vector<int64_t>& counts, Activations& saved,
                          const std::function<Tensor(size_t, const Tensor&)>& fn, std::vector<int64_t>* ran) {
  // The grouped GEMM on the CPU: fn(e, rows of expert e) for each local expert's contiguous group
  // of rows (counts[e] each), results [rows, d] f32 in the same order.
  const auto per_expert = [&](const Tensor& rows, const std::vector<int64_t>& n) {
    Tensor out = Tensor::empty({rows.size(0), d_}, DType::f32, rows.device());
    const std::vector<int64_t> begin = group_starts(n);
    for_experts(n, rows.is_meta(), saved, [&](size_t e) {
      const int64_t b = begin[e];
      out.slice(0, b, b + n[e]).copy_from(fn(e, rows.slice(0, b, b + n[e]).clone()));
    });
    return out;
  };
  if (!(etp_ && sp_)) {
    if (ran) *ran = counts;
    return per_expert(x, counts);
  }
  // Split experts under sequence parallelism: every tensor-parallel rank's copies through the slices.
  std::vector<int64_t> gathered_counts;
  const Tensor all = gather_copies(x, counts, gathered_counts);
  std::vector<int64_t> per(static_cast<size_t>(local_), 0);
  for (size_t i = 0; i < gathered_counts.size(); ++i) per[i % size_t(local_)] += gathered_counts[i];
  if (ran) *ran = per;
  return keep_own(per_expert(all, per), gathered_counts);
}

namespace {
// Where each (source rank s, local expert e) block of received rows starts, source-major ([s][e],
// as all-to-all delivers them) and expert-major ([e][s], as the experts take them).
struct BlockStarts {
  std::vector<int64_t> by_source, by_expert;
  BlockStarts(const std::vector<int64_t>& counts, int n, int64_t L)
      : by_source(static_cast<size_t>(n * L)), by_expert(static_cast<size_t>(n * L)) {
    for (int64_t i = 0, at = 0; i < n * L; ++i) {
      by_source[size_t(i)] = at;
      at += counts[size_t(i)];
    }
    for (int64_t e = 0, at = 0; e < L; ++e)
      for (int64_t s = 0; s < n; ++s) {
        by_expert[size_t(s * L + e)] = at;
        at += counts[size_t(s * L + e)];
      }
  }
};

// Copies block i (counts[i] rows) from `from` at from_start[i] to `to` at to_start[i].
void move_blocks(const Tensor& from, const std::vector<int64_t>& from_start, Tensor& to,
                 const std::vector<int64_t>& to_start, const std::vector<int64_t>& counts) {
  for_each_sized(counts, from.is_meta(), {}, [&](int64_t b) {
    const size_t i = size_t(b);
    to.slice(0, to_start[i], to_start[i] + counts[i]).copy_from(from.slice(0, from_start[i], from_start[i] + counts[i]));
  });
}

// Elements sent to / received from each rank: rows of each rank's block of experts x d.
std::vector<int64_t> per_rank_elements(const std::vector<int64_t>& counts, int n, int64_t L, int64_t d) {
  std::vector<int64_t> out(static_cast<size_t>(n), 0);
  for (int o = 0; o < n; ++o)
    for (int64_t e = 0; e < L; ++e) out[size_t(o)] += counts[size_t(o * L + e)] * d;
  return out;
}
}  // namespace

// rows [sum counts, d] in global expert order (rank o's experts are a contiguous block). Returns the
// rows this rank's experts received, grouped by local expert (then by source rank); recv_counts
// [n x local] holds the rows from source s for local expert e at s * local + e.
Tensor Moe::dispatch(const Tensor& rows, const std::vector<int64_t>& counts, std::vector<int64_t>& recv_counts) const {
  ProfileScope prof("moe_dispatch");
  const int n = ep_->size();
  std::vector<int64_t> send_counts(counts.begin(), counts.end());
  recv_counts.assign(static_cast<size_t>(n * local_), 0);
  ep_->all_to_all(send_counts.data(), recv_counts.data(), local_, DType::i64);  // rows per (rank, expert)
  int64_t total = 0;
  for (int64_t c : recv_counts) total += c;
  Tensor by_source = Tensor::empty({total, d_}, rows.dtype(), rows.device());
  const Tensor src = rows.is_contiguous() ? rows : rows.clone();
  exchange(src.device_ptr(), per_rank_elements(counts, n, local_, d_), by_source.device_ptr(),
           per_rank_elements(recv_counts, n, local_, d_), rows.dtype(), TracedTransfer::moe_dispatch);
  Tensor grouped = Tensor::empty({total, d_}, rows.dtype(), rows.device());
  const BlockStarts starts(recv_counts, n, local_);
  move_blocks(by_source, starts.by_source, grouped, starts.by_expert, recv_counts);
  return grouped;
}

// The inverse of dispatch for f32 rows grouped by local expert: back to their source ranks, in the
// source's global expert order.
Tensor Moe::combine(const Tensor& rows, const std::vector<int64_t>& counts, const std::vector<int64_t>& recv_counts) const {
  ProfileScope prof("moe_combine_exchange");
  const int n = ep_->size();
  Tensor by_source = Tensor::empty({rows.size(0), d_}, DType::f32, rows.device());
  const BlockStarts starts(recv_counts, n, local_);
  move_blocks(rows, starts.by_expert, by_source, starts.by_source, recv_counts);
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  Tensor back = Tensor::empty({total, d_}, DType::f32, rows.device());
  exchange(by_source.device_ptr(), per_rank_elements(recv_counts, n, local_, d_), back.device_ptr(),
           per_rank_elements(counts, n, local_, d_), DType::f32, TracedTransfer::moe_combine);
  return back;
}

namespace {
// The exchanges of the F&B pair running now whose pass has yielded (at most one per pass; the
// passes take turns, so no lock). MPI moves a non-blocking collective only inside MPI calls: each
// exchange started tests the other pass's, so both progress at every hand-over.
std::vector<comm::Work*> g_exchanges_in_flight;
}  // namespace

// The rows' all-to-all of dispatch and combine. Inside an F&B pair (core/paired_tasks.h) the other
// pass runs while the rows are in flight; elsewhere the yield returns at once. (`bench --profile`
// then counts the other pass's time inside moe_dispatch / moe_combine_exchange.)
void Moe::exchange(const void* in, const std::vector<int64_t>& send_counts, void* out,
                   const std::vector<int64_t>& recv_counts, DType t, TracedTransfer what) const {
  const bool traced = recording_transfer_spans();  // a traced step draws the transfer
  const double start = traced ? steady_seconds() : 0;
  std::unique_ptr<comm::Work> rows = [&] {
    const comm::PairedOverlapScope overlappable;  // what a fused pair's other pass computes beside
    return ep_->all_to_all_v_async(in, send_counts, out, recv_counts, t);
  }();
  for (comm::Work* other : g_exchanges_in_flight) other->test();
  g_exchanges_in_flight.push_back(rows.get());
  try {
    yield_to_paired_task();
  } catch (...) {
    // The other pass failed: the step is lost. A collective cannot be cancelled and its peers may be
    // gone, so it is left in flight (leaked) rather than waited for.
    std::erase(g_exchanges_in_flight, rows.get());
    (void)rows.release();
    throw;
  }
  std::erase(g_exchanges_in_flight, rows.get());
  rows->wait();
  if (traced) note_transfer_span(what, start, steady_seconds());
}

void Moe::drop_over_capacity(int64_t N, const float* weights, std::vector<int32_t>& routed) const {
  // Capacity per expert (Switch Transformer): capacity_factor x the even share of this rank's copies.
  const int64_t E = rc_.experts, k = rc_.topk;
  const auto capacity = int64_t(std::ceil(capacity_factor_ * double(N * k) / double(E)));
  std::vector<std::vector<int64_t>> copies(static_cast<size_t>(E));
  for (int64_t c = 0; c < N * k; ++c) copies[size_t(routed[size_t(c)])].push_back(c);  // in token order
  for (auto& list : copies) {
    if (int64_t(list.size()) <= capacity) continue;
    if (drop_by_probs_)  // keep the copies with the largest gate weights
      std::stable_sort(list.begin(), list.end(), [&](int64_t a, int64_t b) { return weights[a] > weights[b]; });
    for (size_t i = size_t(capacity); i < list.size(); ++i) routed[size_t(list[i])] = int32_t(E);
  }
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

Tensor Moe::gather_copies(const Tensor& x, const std::vector<int64_t>& counts,
                          std::vector<int64_t>& gathered_counts) const {
  const int n = etp_->size();
  const int64_t L = local_;
  gathered_counts.assign(static_cast<size_t>(n * L), 0);
  etp_->all_gather(counts.data(), gathered_counts.data(), L, DType::i64);  // [rank][expert]
  std::vector<int64_t> rows_of(static_cast<size_t>(n), 0), elems(static_cast<size_t>(n));
  int64_t total = 0;
  for (int s = 0; s < n; ++s) {
    for (int64_t e = 0; e < L; ++e) rows_of[size_t(s)] += gathered_counts[size_t(s * L + e)];
    elems[size_t(s)] = rows_of[size_t(s)] * d_;
    total += rows_of[size_t(s)];
  }
  const Tensor xc = x.is_contiguous() ? x : x.clone();
  Tensor by_rank = Tensor::empty({total, d_}, x.dtype(), x.device());
  etp_->all_gather_v(xc.device_ptr(), by_rank.device_ptr(), elems, x.dtype());
  const BlockStarts starts(gathered_counts, n, L);  // rank-major as gathered -> expert-major
  Tensor by_expert = Tensor::empty({total, d_}, x.dtype(), x.device());
  move_blocks(by_rank, starts.by_source, by_expert, starts.by_expert, gathered_counts);
  return by_expert;
}

Tensor Moe::keep_own(const Tensor& rows, const std::vector<int64_t>& gathered_counts) const {
  const int n = etp_->size(), me = etp_->rank();
  const int64_t L = local_;
  const BlockStarts starts(gathered_counts, n, L);
  // This rank's blocks only: zero counts elsewhere, destinations packed from 0.
  std::vector<int64_t> mine(gathered_counts.size(), 0), to(gathered_counts.size(), 0);
  int64_t at = 0;
  for (int64_t e = 0; e < L; ++e) {
    const size_t i = size_t(me * L + e);
    mine[i] = gathered_counts[i];
    to[i] = at;
    at += mine[i];
  }
  Tensor out = Tensor::empty({at, rows.size(1)}, rows.dtype(), rows.device());
  move_blocks(rows, starts.by_expert, out, to, mine);
  return out;
}

}  // namespace tessel::nn
