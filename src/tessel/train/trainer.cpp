#include "tessel/train/trainer.h"

#include "tessel/core/profiler.h"

#include <limits>
#include <vector>

#include "tessel/nn/context_parallel.h"
#include "tessel/optim/grad_reducer.h"
#include "tessel/pipeline/executor.h"

namespace tessel::train {

namespace {
comm::Communicator* multi_rank(comm::Communicator* c) { return c && c->size() > 1 ? c : nullptr; }

nn::StagePlan stage_plan(const Config& cfg, comm::ParallelState* groups) {
  return !groups || groups->pp_size() == 1 ? nn::whole_model_plan(cfg.model) : cfg.stage_plan(groups->coords().pp);
}
}  // namespace

Trainer::Trainer(const Config& cfg, comm::ParallelState* groups) : cfg_(cfg) {
  comm::Communicator* tp = nullptr;
  if (groups) {
    // Context-parallel ranks see other tokens of the same sequences: gradients are summed (and the
    // distributed optimizer sharded) over data x context parallel ranks.
    cp_ = multi_rank(&groups->cp());
    dp_ = multi_rank(cp_ ? &groups->dp_cp() : &groups->dp());
    tp = multi_rank(&groups->tp());
    tp_ = tp;
    pp_ = multi_rank(&groups->pp());
    // The first and last stages both hold the embedding weight when the head is tied to it or
    // multi-token prediction embeds on the last stage; in a V both stages are on rank 0.
    const pipeline::Placement placement = pipeline::placement_of(cfg_.parallel.pipeline_schedule);
    embedding_ = pp_ && (cfg_.model.tie_embeddings || cfg_.model.mtp_num_layers > 0) &&
                         placement == pipeline::Placement::interleaved
                     ? groups->embedding()
                     : nullptr;
    if (pp_ && placement == pipeline::Placement::dual) {
      // Ranks r and P-1-r hold stages min and max of the two, in that order: one parameter layout.
      const int P = pp_->size();
      mirror_pair_ = pp_->split_by([P](int r) { return std::make_pair(std::min(r, P - 1 - r), r); });
      mirror_pair_->set_label("dualpipe_pair");
      mirror_ = pp_->rank() >= P / 2;
    }
    ep_ = multi_rank(&groups->ep());
    ep_dp_ = ep_ ? multi_rank(&groups->ep_dp()) : nullptr;
  }
  // ZeRO-1 shards over the ranks holding identical parameters (nn/flat_shard.h): the replicated
  // parameters over the data-parallel group, routed experts under expert parallelism over the ranks
  // holding the same experts. In bf16 runs the fp32 masters are sharded with the moments (params.h);
  // fp32 runs compute with the masters, which stay whole.
  if (cfg_.parallel.use_distributed_optimizer) {
    shard_ = dp_;
    expert_shard_ = shard_ ? ep_dp_ : nullptr;
  }
  const auto place = [](comm::Communicator* g) { return g ? nn::MasterShard{g->rank(), g->size()} : nn::MasterShard{}; };
  model_ = std::make_unique<nn::Model>(cfg_.model, tp, stage_plan(cfg_, groups), cp_, ep_, place(shard_),
                                       place(expert_shard_));
  model_->params().initialize(uint64_t(cfg_.train.seed));
  if (mirror_)  // the pair's first rank saves these parameters and counts them in the norm
    for (const auto& spec : model_->params().specs()) model_->params().mark_tied_copy(spec.offset);
  if (pp_) {
    const int64_t local = cfg_.grad_accumulation_steps() / data_parallel_size();
    schedule_ops_ = pipeline::make_training_schedule(cfg_.parallel.pipeline_schedule, pp_->size(),
                                                     int(cfg_.parallel.virtual_pipeline_model_parallel_size),
                                                     int(local));
  }
  optim::AdamWConfig oc;
  oc.beta1 = cfg_.train.adam_beta1;
  oc.beta2 = cfg_.train.adam_beta2;
  oc.eps = cfg_.train.adam_eps;
  oc.weight_decay = cfg_.train.weight_decay;
  oc.clip_grad = cfg_.train.clip_grad;
  // Each rank updates the master weights and keeps Adam moments for its shard only (the store's).
  opt_ = std::make_unique<optim::AdamW>(model_->params(), oc, optim::NormGroups{shard_, tp, pp_, ep_, expert_shard_});
  if (shard_ && cfg_.parallel.overlap_param_gather) {
    // Each unit of the shard over its own group (under expert parallelism: the replicated parameters
    // over the data-parallel ranks, routed experts over the ranks holding the same experts).
    std::vector<optim::ParamGather::Unit> units;
    for (const nn::FlatShard::Unit& u : model_->params().shard().units()) {
      comm::Communicator* g = unit_group(u);
      units.push_back({g, u.flat_begin, g ? u.counts : std::vector<int64_t>{u.numel()}});
    }
    param_gather_ = std::make_unique<optim::ParamGather>(std::move(units), model_->forward_order_ranges());
    model_->set_params_needed([this](int64_t b, int64_t e) { param_gather_->wait_for(b, e); });
  }
  schedule_.lr = cfg_.train.lr;
  schedule_.min_lr = cfg_.train.min_lr;
  schedule_.warmup_iters = cfg_.train.lr_warmup_iters;
  schedule_.total_iters = std::max<int64_t>(1, cfg_.train.train_iters);
  schedule_.style = cfg_.train.lr_decay_style;
  schedule_.wsd_decay_iters = cfg_.train.lr_wsd_decay_iters;
  schedule_.validate();
}

bool Trainer::buckets_reduce_grads() const {
  // Under expert parallelism experts and the rest reduce over their own groups, unit by unit
  // (grad_units). Not with the distributed optimizer when the embedding is tied across pipeline stages: the two
  // stages' copies (other offsets, so other owners) must be summed before the shards are reduced.
  // The distributed optimizer reduces its buckets during backward only with
  // parallel.overlap_grad_reduce; otherwise it reduce-scatters after backward (one blocking
  // collective: with OpenMPI on one machine faster than per-bucket non-blocking reduces, which
  // progress only inside MPI calls; docs/perf.md).
  if (!dp_) return false;
  return distributed_optimizer() ? !embedding_ && cfg_.parallel.overlap_grad_reduce : true;
}

std::vector<optim::GradReducer::Unit> Trainer::grad_units() const {
  const nn::ParamStore& ps = model_->params();
  std::vector<optim::GradReducer::Unit> units;
  if (distributed_optimizer()) {  // the shard's units, each reduced to its owners over its group
    for (const nn::FlatShard::Unit& u : ps.shard().units())
      units.push_back({unit_group(u), u.flat_begin, u.flat_end, u.counts});
    return units;
  }
  // All-reduced: runs of adjacent parameters of one kind, routed experts over the ranks holding the
  // same experts (null without other such ranks), the rest over dp.
  bool run_is_experts = false;
  for (const nn::ParamSpec& s : ps.specs()) {
    const bool expert = ep_ && s.expert;
    if (units.empty() || expert != run_is_experts) {  // a new run starts where the last one ended
      const int64_t begin = units.empty() ? 0 : units.back().end;
      units.push_back({expert ? ep_dp_ : dp_, begin, begin, {}});
      run_is_experts = expert;
    }
    units.back().end = s.offset + s.numel;
  }
  if (!units.empty()) units.back().end = ps.numel();
  return units;
}

std::string Trainer::overlap_grad_reduce_ignored() const {
  if (!cfg_.parallel.overlap_grad_reduce || !distributed_optimizer()) return "";
  if (embedding_)
    return "the embedding is held by the first and last pipeline stages, whose two gradients are summed after "
           "backward before the shards are reduced";
  return "";
}

int64_t Trainer::data_parallel_size() const { return dp_ ? dp_->size() / (cp_ ? cp_->size() : 1) : 1; }

data::Batch Trainer::local_part(const data::Batch& b) const {
  if (!cp_) return b;
  return {nn::cp_local_slice(b.tokens, cp_->rank(), cp_->size()),
          nn::cp_local_slice(b.targets, cp_->rank(), cp_->size())};
}

StepResult Trainer::step(const std::vector<data::Batch>& whole_micro_batches, int64_t iter) {
  const int64_t dp = data_parallel_size();
  TESSEL_CHECK(int64_t(whole_micro_batches.size()) * dp == cfg_.grad_accumulation_steps(),
               "step: {} micro-batches on each of {} data-parallel ranks, the config needs {} in all",
               whole_micro_batches.size(), dp, cfg_.grad_accumulation_steps());
  // This rank's tokens of a micro-batch (its context-parallel chunks) are cut when its forward
  // starts, so they live with its activations rather than all of them for the whole step.
  const pipeline::LocalPart local{[this](const data::Batch& mb) { return local_part(mb); }, cp_ ? cp_->size() : 1};
  int64_t tokens = 0;
  for (const auto& mb : whole_micro_batches) tokens += mb.targets.numel() / local.parts;
  if (dp_) dp_->all_reduce(&tokens, 1, DType::i64, comm::ReduceOp::sum);
  auto& ps = model_->params();
  ps.zero_grads();
  const float scale = 1.0f / float(tokens);  // loss = mean over all tokens of the global batch
  double loss = 0;
  const bool sharded = distributed_optimizer();
  std::unique_ptr<optim::GradReducer> reducer;
  if (buckets_reduce_grads()) {
    // The distributed optimizer reduces each bucket to the ranks owning its parts (shard_ is dp_ here).
    reducer = std::make_unique<optim::GradReducer>(ps.grads_flat(), cfg_.parallel.ddp_bucket_size, grad_units());
  }
  nn::Model::GradsReady ready;
  if (reducer) ready = [&](int64_t b, int64_t e) { reducer->ready(b, e); };
  if (pp_) {
    MemoryPhaseScope phase("pipeline schedule");
    loss = pipeline::run_schedule(schedule_ops_, *model_, *pp_, whole_micro_batches, scale, ready, local,
                                  {cfg_.log.pipeline_trace ? &last_trace_ : nullptr, cfg_.parallel.overlap_p2p_comm,
                                   cfg_.fuses_moe_pairs()});
    loss = comm::sum_in_rank_order(*pp_, loss);  // the last stage's loss, on every stage
  } else {
    for (size_t k = 0; k < whole_micro_batches.size(); ++k) {  // gradients are final during the last backward
      MemoryPhaseScope phase("forward", int(k), 0);
      const data::Batch mb = local.cut(whole_micro_batches[k]);
      loss += model_->forward_backward(mb.tokens, mb.targets, scale, k + 1 == whole_micro_batches.size() ? ready : nullptr);
    }
  }
  MemoryPhaseScope phase("gradient reduction");
  if (reducer) reducer->finish();
  // DualPipe: each copy of a stage saw half of the micro-batches; the pair sums its gradients (all of
  // them here; under ZeRO only the owned shard, once it is reduced over data parallelism, below).
  const auto sum_over_mirror_pair = [&](int64_t begin, int64_t end) {
    ProfileScope prof("mirror_grad_sum");
    mirror_pair_->all_reduce(ps.grads_flat().slice(0, begin, end).device_ptr(), end - begin, DType::f32,
                             comm::ReduceOp::sum);
  };
  if (mirror_pair_ && !sharded) sum_over_mirror_pair(0, ps.grads_flat().numel());
  if (dp_) loss = comm::sum_in_rank_order(*dp_, loss);
  if (embedding_) reduce_tied_embedding();
  model_->reduce_tensor_parallel_grads();
  if (sharded && !reducer) reduce_scatter_grads();
  // Both ranks of a pair own the same shard (one layout, the same data-parallel rank).
  if (mirror_pair_ && sharded) for_each_owned_flat_range(sum_over_mirror_pair);
  if (poison_gradients_) {  // fault injection: one NaN in this rank's own (reduced) gradients
    poison_gradients_ = false;
    int64_t at = -1;
    for_each_owned_flat_range([&](int64_t b, int64_t) { at = at < 0 ? b : at; });
    at = std::max<int64_t>(at, 0);  // an empty shard: any element
    ps.grads_flat().slice(0, at, at + 1).fill(std::numeric_limits<double>::quiet_NaN());
  }
  const double lr = schedule_.at(iter) * lr_scale_;
  MemoryPhaseScope stepping("optimizer step");
  const double norm = opt_->step(lr);
  // Delayed FP8 scaling: one amax per tensor across tensor- and data-parallel ranks (experts': the
  // ranks holding the same experts), next scales.
  if (auto* fp8 = model_->fp8_state())
    fp8->end_step({tp_, dp_, mirror_pair_.get()},
                  ep_ ? std::vector<comm::Communicator*>{tp_, ep_dp_, mirror_pair_.get()} : std::vector<comm::Communicator*>{});
  StepResult r;
  r.loss = loss / double(tokens);
  r.grad_norm = norm;
  r.lr = lr;
  if (cfg_.model.mtp_num_layers > 0) {
    auto [sum, count] = model_->take_mtp_loss();  // on the last pipeline stage
    for (comm::Communicator* g : {dp_, pp_})
      if (g) {
        sum = comm::sum_in_rank_order(*g, sum);
        g->all_reduce(&count, 1, DType::i64, comm::ReduceOp::sum);
      }
    r.mtp_loss = count > 0 ? sum / double(count) : 0.0;
  }
  if (cfg_.model.num_experts > 0) {
    // Expert loads over every replica (the bias moves alike everywhere); each layer's ratio and the
    // auxiliary losses from whichever pipeline stage holds it.
    // Under sequence and context parallelism each rank routed only its rows: their loads and their
    // shares of the auxiliary losses add up too (dp_ spans the context-parallel ranks).
    comm::Communicator* sp = cfg_.parallel.sequence_parallel ? tp_ : nullptr;
    r.expert_load_max_mean = model_->moe_end_step({dp_, sp, mirror_pair_.get()});
    if (mirror_) r.expert_load_max_mean.assign(r.expert_load_max_mean.size(), 0.0);  // its pair reports them
    double aux = model_->moe_take_aux_loss();
    for (comm::Communicator* g : {sp, dp_})
      if (g) aux = comm::sum_in_rank_order(*g, aux);
    if (pp_) {
      aux = comm::sum_in_rank_order(*pp_, aux);
      std::vector<float> ratio(r.expert_load_max_mean.begin(), r.expert_load_max_mean.end());
      pp_->all_reduce(ratio.data(), int64_t(ratio.size()), DType::f32, comm::ReduceOp::sum);
      r.expert_load_max_mean.assign(ratio.begin(), ratio.end());
    }
    r.moe_aux_loss = aux;
  }
  if (sharded) {
    // All-gather the updated shards so every replica holds the whole model again: now, or (overlapped)
    // bucket by bucket while the next forward runs, each layer waiting for its own weights.
    MemoryPhaseScope gathering("parameter all-gather");
    ProfileScope prof(param_gather_ ? "param_gather_launch" : "param_gather_wait");
    if (param_gather_) param_gather_->wait_all();  // the forward took every bucket; this is a safeguard
    if (ps.masters_sharded()) {
      // The update wrote this shard's part of the compute copy and of the fp32 copy (adamw.cpp): the
      // rest comes from the other shards, in bf16 (half the bytes of gathering the masters).
      const Tensor copy = ps.compute_at(0, {ps.numel()});
      const Tensor& f32 = ps.f32_copy();
      // The fp32 copy (norms, biases, router, the embedding unless precision.fp32_embedding is off)
      // of unit u over its group: in place, each rank's block of the unit's packed part at its place.
      // Null when there is nothing to gather.
      const auto& units = ps.shard().units();
      const auto gather_f32_unit = [&](size_t u, bool async) -> std::unique_ptr<comm::Work> {
        comm::Communicator* g = unit_group(units[u]);
        if (!g) return nullptr;  // this rank alone holds these experts: the update wrote them all
        const std::vector<int64_t> counts = ps.f32_copy_counts(u);
        int64_t total = 0;
        for (const int64_t c : counts) total += c;
        if (total == 0) return nullptr;  // no parameter of the unit computes in fp32
        const Tensor part = f32.slice(0, ps.f32_copy_unit_begin(u), ps.f32_copy_unit_begin(u) + total);
        if (async) return g->all_gather_v_async(part.device_ptr(), counts, DType::f32);
        int64_t at = ps.f32_copy_unit_begin(u);
        for (int k = 0; k < g->rank(); ++k) at += counts[size_t(k)];
        g->all_gather_v(f32.slice(0, at, at + counts[size_t(g->rank())]).device_ptr(), part.device_ptr(), counts,
                        DType::f32);
        return nullptr;
      };
      if (param_gather_) {
        // The fp32 copy first: the forward's first wait takes it.
        std::vector<std::unique_ptr<comm::Work>> first;
        const comm::OverlappedCommScope behind_forward;
        for (size_t u = 0; u < units.size(); ++u)
          if (auto w = gather_f32_unit(u, true)) first.push_back(std::move(w));
        param_gather_->launch(copy, std::move(first));
      } else {
        for (size_t u = 0; u < units.size(); ++u) {
          if (unit_group(units[u])) gather_unit(units[u], copy);
          gather_f32_unit(u, false);
        }
      }
      ps.mark_updated();  // derived forms (FP8 weights) are rebuilt when next read, after the waits
    } else {
      const Tensor& p = ps.params_flat();
      if (param_gather_) {
        param_gather_->launch(p);  // fp32: the masters are what the forward reads
        ps.mark_updated();
      } else {
        for (const nn::FlatShard::Unit& u : ps.shard().units())
          if (unit_group(u)) gather_unit(u, p);
        ps.refresh_compute_copy();
      }
    }
  }
  return r;
}

comm::Communicator* Trainer::unit_group(const nn::FlatShard::Unit& u) const {
  return u.experts ? expert_shard_ : shard_;
}

template <class Fn>
void Trainer::for_each_owned_flat_range(Fn fn) const {
  for (const nn::FlatShard::Unit& u : model_->params().shard().units())
    if (u.own_begin < u.own_end) fn(u.own_begin, u.own_end);
}

void Trainer::reduce_scatter_grads() {
  // Unit by unit, in place on the flat gradients: every rank receives the sums of its own block.
  ProfileScope prof("dp_grad_wait");  // all of it exposed
  const nn::ParamStore& ps = model_->params();
  for (const nn::FlatShard::Unit& u : ps.shard().units()) {
    comm::Communicator* g = unit_group(u);
    if (!g) continue;  // experts this rank alone holds: their gradients are complete
    Tensor mine;
    {
      MemoryCategoryScope tag(MemoryCategory::communication);
      mine = Tensor::empty({u.own_end - u.own_begin}, DType::f32);
    }
    g->reduce_scatter_v(ps.grads_flat().slice(0, u.flat_begin, u.flat_end).device_ptr(), mine.device_ptr(), u.counts,
                        DType::f32, comm::ReduceOp::sum);
    ps.grads_flat().slice(0, u.own_begin, u.own_end).copy_from(mine);
  }
}

void Trainer::gather_unit(const nn::FlatShard::Unit& u, const Tensor& flat) {
  // In place: each rank's block already sits at its offset in the unit.
  unit_group(u)->all_gather_v(flat.slice(0, u.own_begin, u.own_end).device_ptr(),
                              flat.slice(0, u.flat_begin, u.flat_end).device_ptr(), u.counts, flat.dtype());
}

void Trainer::reduce_tied_embedding() {
  const auto& spec = model_->params().spec("model.embed_tokens.weight");
  embedding_->all_reduce(model_->params().grads_flat().slice(0, spec.offset, spec.offset + spec.numel).device_ptr(),
                         spec.numel, DType::f32, comm::ReduceOp::sum);
}

std::string Trainer::pipeline_trace_json() {
  if (!pp_) return "";
  const auto ranks = pipeline::gather_traces(*pp_, last_trace_);
  if (pp_->rank() != 0) return "";
  return pipeline::chrome_trace(fmt::format("{} step, pp {}, {} micro-batches", schedule_ops_.kind, schedule_ops_.pp,
                                            schedule_ops_.micro_batches),
                                ranks);
}

std::vector<std::pair<std::string, Tensor>> Trainer::checkpoint_state_tensors() const {
  if (mirror_) return {};
  return model_->state_tensors();
}

int64_t TrainerSnapshot::bytes() const {
  int64_t n = 0;
  for (const Tensor* t : {&masters, &compute_copy, &f32_copy, &exp_avg, &exp_avg_sq})
    if (t->defined()) n += t->nbytes();
  for (const auto& [name, t] : state) n += t.nbytes();
  return n;
}

TrainerSnapshot Trainer::snapshot() {
  wait_for_parameters();  // the compute copy is whole only once the overlapped all-gather is done
  const MemoryCategoryScope tag(MemoryCategory::optimizer_state);  // training state kept for a rewind
  const nn::ParamStore& ps = model_->params();
  TrainerSnapshot s;
  s.masters = ps.masters().clone();
  if (ps.compute_dtype() != DType::f32 || ps.masters_sharded()) s.compute_copy = ps.compute_at(0, {ps.numel()}).clone();
  if (ps.masters_sharded() && ps.f32_copy().defined()) s.f32_copy = ps.f32_copy().clone();
  s.exp_avg = opt_->exp_avg().clone();
  s.exp_avg_sq = opt_->exp_avg_sq().clone();
  s.optimizer_steps = opt_->steps_taken();
  for (const auto& [name, t] : model_->state_tensors()) s.state.emplace_back(name, t.clone());
  return s;
}

void Trainer::restore(const TrainerSnapshot& s) {
  wait_for_parameters();  // nothing in flight may write the buffers after they are restored
  nn::ParamStore& ps = model_->params();
  // Tensors are handles: these copies write into the store's and the optimizer's own buffers.
  for (auto [into, from] : {std::pair{ps.masters(), &s.masters}, std::pair{opt_->exp_avg(), &s.exp_avg},
                            std::pair{opt_->exp_avg_sq(), &s.exp_avg_sq}})
    into.copy_from(*from);
  if (s.compute_copy.defined()) ps.compute_at(0, {ps.numel()}).copy_from(s.compute_copy);
  if (s.f32_copy.defined()) {
    Tensor f32 = ps.f32_copy();
    f32.copy_from(s.f32_copy);
  }
  opt_->set_steps_taken(s.optimizer_steps);
  const auto missing = model_->load_state_tensors(s.state);
  TESSEL_CHECK(missing.empty(), "restoring a snapshot: {} state tensors missing (the first: {})", missing.size(),
               missing.empty() ? "" : missing.front());
  ps.mark_updated();  // derived forms (FP8 weights) are rebuilt from the restored values
}

void Trainer::wait_for_parameters() {
  if (param_gather_) param_gather_->wait_all();
}

double Trainer::eval_loss_sum(const data::Batch& whole) {
  wait_for_parameters();  // the forward would wait layer by layer; evaluation between steps need not
  const data::Batch batch = local_part(whole);
  const double loss =
      pp_ ? pipeline::forward_only_loss(*model_, *pp_, batch, schedule_ops_.placement)
          : model_->loss_sum(batch.tokens, batch.targets);
  return cp_ ? comm::sum_in_rank_order(*cp_, loss) : loss;
}

GatheredOptimizerState Trainer::full_optimizer_state() {
  wait_for_parameters();  // its gathers must not interleave with the ones in flight on other ranks' order
  const DeviceAccessScope host_copy;  // the moments, for a checkpoint's copy to the host
  GatheredOptimizerState g;
  if (!distributed_optimizer()) {
    g.view = {opt_->exp_avg_data(), opt_->exp_avg_sq_data(), opt_->steps_taken()};
    return g;
  }
  const nn::ParamStore& ps = model_->params();
  const size_t total = static_cast<size_t>(ps.numel());
  // Every unit's blocks, gathered over its group into their flat places.
  const auto gather = [&](const float* local, std::vector<float>& out) {
    out.resize(total);
    for (const nn::FlatShard::Unit& u : ps.shard().units()) {
      const float* mine = local + u.local_begin;
      if (comm::Communicator* grp = unit_group(u))
        grp->all_gather_v(mine, out.data() + u.flat_begin, u.counts, DType::f32);
      else
        std::copy(mine, mine + u.numel(), out.begin() + u.flat_begin);
    }
  };
  gather(opt_->exp_avg_data(), g.exp_avg);
  gather(opt_->exp_avg_sq_data(), g.exp_avg_sq);
  g.view = {g.exp_avg.data(), g.exp_avg_sq.data(), opt_->steps_taken()};
  if (ps.masters_sharded()) {
    gather(ps.masters().data<float>(), g.masters);
    g.view.masters = g.masters.data();
  }
  return g;  // moved: the vectors keep their buffers, so the view stays valid
}

}  // namespace tessel::train
