#include "tessel/optim/adamw.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "tessel/core/profiler.h"
#include "tessel/kernels/adamw.h"

namespace tessel::optim {

namespace {
comm::Communicator* multi_rank(comm::Communicator* c) { return c && c->size() > 1 ? c : nullptr; }
}  // namespace

AdamW::AdamW(nn::ParamStore& ps, AdamWConfig cfg, NormGroups groups) : AdamW(ps, cfg, ps.shard(), groups) {}

AdamW::AdamW(nn::ParamStore& ps, AdamWConfig cfg, int64_t own_begin, int64_t own_end, NormGroups groups)
    : AdamW(ps, cfg, nn::FlatShard::block(ps.numel(), own_begin, own_end < 0 ? ps.numel() : own_end), groups) {}

AdamW::AdamW(nn::ParamStore& ps, AdamWConfig cfg, nn::FlatShard owned, NormGroups groups)
    : ps_(ps),
      cfg_(cfg),
      owned_(std::move(owned)),
      groups_{multi_rank(groups.shard), multi_rank(groups.tp), multi_rank(groups.pp), multi_rank(groups.ep),
              multi_rank(groups.expert_shard)} {
  // A sharded store (its masters packed in its shard's order, its collectives by its units): the
  // optimizer must own exactly that shard.
  TESSEL_CHECK(ps.shard().owns_all() || owned_.same_ownership(ps.shard()),
               "AdamW: owned range {} is not the masters' shard {}", owned_.describe(), ps.shard().describe());
  MemoryCategoryScope tag(MemoryCategory::optimizer_state);
  m_ = Tensor::zeros({owned_.local_numel()}, DType::f32);
  v_ = Tensor::zeros({owned_.local_numel()}, DType::f32);
}

double AdamW::step(double lr) {
  ProfileScope prof("optimizer");
  // Parameters replicated over tensor parallelism (identical gradients on every rank of the group)
  // count on its rank 0 only, replicated key/value slices on their replica 0; tensor-parallel shards
  // and pipeline stages add up.
  const bool tp_lead = !groups_.tp || groups_.tp->rank() == 0;
  double sq = 0, sq_experts = 0;  // experts differ across expert-parallel ranks; the rest is replicated
  // Gradients this rank updates with but another rank counts (tied copies, such as all of a DualPipe
  // mirror's stages; replicas): their values stay out of the norm, but a NaN or Inf among them must
  // not, or this rank alone would take a poisoned update that nobody flags. 0 x their sum of squares
  // adds exactly 0 while they are finite and NaN when not; the sums below carry it over the shard,
  // tensor- and pipeline-parallel groups, and the trainer agrees on a non-finite step over all ranks.
  double uncounted = 0;
  for (const auto& s : ps_.specs()) {
    const auto part = owned_.part_of(s);
    if (!part) continue;
    const double g = kernels::sum_squares(ps_.grads_flat().slice(0, part->flat_begin, part->flat_end));
    if (s.tied_copy || s.replica != 0 || (s.shape == s.global_shape && !tp_lead))
      uncounted += g;
    else
      (s.expert ? sq_experts : sq) += g;
  }
  sq += 0.0 * uncounted;
  // In rank order, group after group: the same value to the last bit on every rank. The replicated
  // parameters' shards add up over the shard group; the experts' over the ranks holding the same
  // experts, then over the expert-parallel ranks holding the others.
  for (comm::Communicator* g : {groups_.expert_shard, groups_.ep})
    if (g) sq_experts = comm::sum_in_rank_order(*g, sq_experts);
  if (groups_.shard) sq = comm::sum_in_rank_order(*groups_.shard, sq);
  sq += sq_experts;
  for (comm::Communicator* g : {groups_.tp, groups_.pp})
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
  // Sharded masters are packed as the moments are (the store's shard is the owned one); whole ones
  // are the flat parameters.
  const Tensor& masters = ps_.masters();
  for (const auto& s : ps_.specs()) {
    const auto own = owned_.part_of(s);  // the part of this parameter this rank updates
    if (!own) continue;
    const int64_t b = own->flat_begin, e = own->flat_end, l = own->local_begin, n = e - b;
    const kernels::AdamWHyper h{float(lr), float(cfg_.beta1), float(cfg_.beta2), float(cfg_.eps),
                                s.weight_decay ? float(cfg_.weight_decay) : 0.0f, step_};
    const Tensor master = ps_.masters_sharded() ? part(masters, l, l + n) : part(masters, b, e);
    kernels::adamw_update(master, part(ps_.grads_flat(), b, e), part(m_, l, l + n), part(v_, l, l + n), h, grad_scale,
                          copy.defined() ? part(copy, b, e) : Tensor());
    if (ps_.masters_sharded() && s.f32_compute)  // its whole fp32 copy too (the trainer gathers the rest)
      part(ps_.f32_copy(), s.f32_offset + (b - s.offset), s.f32_offset + (e - s.offset)).copy_from(master);
  }
  ps_.mark_updated();  // the update also rewrote the bf16 copy
  return norm;
}

}  // namespace tessel::optim
