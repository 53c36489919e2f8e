#include "tessel/optim/adamw.h"

#include <algorithm>
#include <cmath>

#include "tessel/core/profiler.h"
#include "tessel/kernels/adamw.h"

namespace tessel::optim {

namespace {
comm::Communicator* multi_rank(comm::Communicator* c) { return c && c->size() > 1 ? c : nullptr; }
}  // namespace

AdamW::AdamW(nn::ParamStore& ps, AdamWConfig cfg, int64_t own_begin, int64_t own_end, NormGroups groups)
    : ps_(ps),
      cfg_(cfg),
      begin_(own_begin),
      end_(own_end < 0 ? ps.numel() : own_end),
      groups_{multi_rank(groups.shard), multi_rank(groups.tp), multi_rank(groups.pp), multi_rank(groups.ep)} {
  TESSEL_CHECK(0 <= begin_ && begin_ <= end_ && end_ <= ps.numel(), "AdamW: owned range [{}, {}) outside [0, {})",
               begin_, end_, ps.numel());
  TESSEL_CHECK(!ps.masters_sharded() || (begin_ == ps.master_begin() && end_ == ps.master_end()),
               "AdamW: owned range [{}, {}) is not the masters' shard [{}, {})", begin_, end_, ps.master_begin(),
               ps.master_end());
  MemoryCategoryScope tag(MemoryCategory::optimizer_state);
  m_ = Tensor::zeros({end_ - begin_}, DType::f32);
  v_ = Tensor::zeros({end_ - begin_}, DType::f32);
}

double AdamW::step(double lr) {
  ProfileScope prof("optimizer");
  // Parameters replicated over tensor parallelism (identical gradients on every rank of the group)
  // count on its rank 0 only, replicated key/value slices on their replica 0; tensor-parallel shards
  // and pipeline stages add up.
  const bool tp_lead = !groups_.tp || groups_.tp->rank() == 0;
  double sq = 0, sq_experts = 0;  // experts differ across expert-parallel ranks; the rest is replicated
  for (const auto& s : ps_.specs()) {
    if (s.tied_copy || s.replica != 0 || (s.shape == s.global_shape && !tp_lead)) continue;
    const int64_t b = std::max(begin_, s.offset), e = std::min(end_, s.offset + s.numel);
    if (b < e) (s.expert ? sq_experts : sq) += kernels::sum_squares(ps_.grads_flat().slice(0, b, e));
  }
  if (groups_.ep) sq_experts = comm::sum_in_rank_order(*groups_.ep, sq_experts);
  sq += sq_experts;
  // In rank order, group after group: the same value to the last bit on every rank.
  for (comm::Communicator* g : {groups_.shard, groups_.tp, groups_.pp})
    if (g) sq = comm::sum_in_rank_order(*g, sq);
  const double norm = std::sqrt(sq);
  float grad_scale = 1.0f;  // clipping, applied inside the update (the stored gradients keep their values)
  if (cfg_.clip_grad > 0) {
    const double coef = cfg_.clip_grad / (norm + 1e-6);
    if (coef < 1.0) grad_scale = float(coef);
  }
  ++step_;
  const Tensor copy = ps_.compute_dtype() == DType::bf16 ? ps_.compute_at(0, {ps_.numel()}) : Tensor();
  auto part = [](const Tensor& flat, int64_t b, int64_t e) { return flat.slice(0, b, e); };
  const Tensor& masters = ps_.masters();  // element 0 is flat element master_begin()
  const int64_t m0 = ps_.master_begin();
  for (const auto& s : ps_.specs()) {
    // The part of this parameter inside the owned range.
    const int64_t b = std::max(begin_, s.offset), e = std::min(end_, s.offset + s.numel);
    if (b >= e) continue;
    const kernels::AdamWHyper h{float(lr), float(cfg_.beta1), float(cfg_.beta2), float(cfg_.eps),
                                s.weight_decay ? float(cfg_.weight_decay) : 0.0f, step_};
    const Tensor master = part(masters, b - m0, e - m0);
    kernels::adamw_update(master, part(ps_.grads_flat(), b, e), part(m_, b - begin_, e - begin_),
                          part(v_, b - begin_, e - begin_), h, grad_scale,
                          copy.defined() ? part(copy, b, e) : Tensor());
    if (ps_.masters_sharded() && s.f32_compute)  // its whole fp32 copy too (the trainer gathers the rest)
      part(ps_.f32_copy(), s.f32_offset + (b - s.offset), s.f32_offset + (e - s.offset)).copy_from(master);
  }
  ps_.mark_updated();  // the update also rewrote the bf16 copy
  return norm;
}

}  // namespace tessel::optim
