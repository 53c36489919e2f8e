#include "tessel/pipeline/executor.h"

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "tessel/core/device.h"
#include "tessel/core/paired_tasks.h"
#include "tessel/core/profiler.h"
#include "tessel/core/transfer_spans.h"
#include "tessel/nn/moe.h"
#include "tessel/pipeline/simulate.h"

namespace tessel::pipeline {

namespace {

enum Direction { kForward = 0, kBackward = 1 };

int tag(int mb, int chunk, int vpp, Direction d) { return (mb * vpp + chunk) * 2 + int(d); }


const char* phase_of(OpKind k) {
  switch (k) {
    case OpKind::F: return "forward";
    case OpKind::B: return "backward";
    case OpKind::W: return "backward (weights)";
    case OpKind::send_fwd: case OpKind::send_bwd: return "pipeline send";
    case OpKind::recv_fwd: case OpKind::recv_bwd: return "pipeline receive";
  }
  return "pipeline";
}

// The op that receives what `op` (a send of rank `me`) sends, on the receiving rank, and the op that
// sent what `op` (a receive of rank `me`) receives, on the sending rank.
struct Peer {
  int rank;
  Op op;
};
Peer receiver_of(const Schedule& s, int me, const Op& op) {
  const bool fwd = op.kind == OpKind::send_fwd;
  const Where to = s.holder(s.virtual_stage(me, op.chunk) + (fwd ? 1 : -1), op.mb);
  return {to.rank, {fwd ? OpKind::recv_fwd : OpKind::recv_bwd, op.mb, to.chunk}};
}
Peer sender_of(const Schedule& s, int me, const Op& op) {
  const bool fwd = op.kind == OpKind::recv_fwd;
  const Where from = s.holder(s.virtual_stage(me, op.chunk) + (fwd ? -1 : 1), op.mb);
  return {from.rank, {fwd ? OpKind::send_fwd : OpKind::send_bwd, op.mb, from.chunk}};
}

// Per chunk, the position of this rank's last W of it: the chunk's gradients are final there (a
// deferred W may run after a later micro-batch's, and a DualPipe chunk never runs the last one).
std::vector<size_t> last_weight_pass(const Schedule& s, int me) {
  std::vector<size_t> last(size_t(s.vpp), 0);
  const std::vector<Op>& ops = s.ranks[size_t(me)];
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i].kind == OpKind::W) last[size_t(ops[i].chunk)] = i;
  return last;
}

// After which of rank `me`'s ops each of its sends is certainly complete, so that its buffer can
// go (release[j]: the sends to free once op j is done): the first later receive from the same peer
// that the peer sent after its own (blocking) receive of that send had returned. Decided by the
// schedule alone, so every backend frees at the same point (the meta device's accounting is the
// CPU run's) and nothing waits on a peer that has not got there yet. Without it a pipeline stage
// holds one activation-sized buffer per micro-batch until the step ends. A send no later receive
// vouches for completes at the end of the step.
std::vector<std::vector<size_t>> sends_released_after(const Schedule& s, int me) {
  const std::vector<Op>& ops = s.ranks[size_t(me)];
  std::map<int, std::map<std::tuple<int, int, int>, size_t>> index;  // peer -> (kind, mb, chunk) -> position
  const auto position = [&](const Peer& p) {
    auto& idx = index[p.rank];
    if (idx.empty()) {
      const std::vector<Op>& theirs = s.ranks[size_t(p.rank)];
      for (size_t i = 0; i < theirs.size(); ++i) idx[{int(theirs[i].kind), theirs[i].mb, theirs[i].chunk}] = i;
    }
    const auto it = idx.find({int(p.op.kind), p.op.mb, p.op.chunk});
    TESSEL_CHECK(it != idx.end(), "pipeline schedule: rank {} has no op matching rank {}'s transfer of micro-batch {}",
                 p.rank, me, p.op.mb);
    return it->second;
  };
  std::vector<std::vector<size_t>> release(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind != OpKind::send_fwd && ops[i].kind != OpKind::send_bwd) continue;
    const Peer to = receiver_of(s, me, ops[i]);
    const size_t received_at = position(to);
    for (size_t j = i + 1; j < ops.size(); ++j) {
      if (ops[j].kind != OpKind::recv_fwd && ops[j].kind != OpKind::recv_bwd) continue;
      const Peer from = sender_of(s, me, ops[j]);
      if (from.rank == to.rank && position(from) > received_at) {
        release[j].push_back(i);
        break;
      }
    }
  }
  return release;
}

bool is_compute(const Op& op) { return op.kind == OpKind::F || op.kind == OpKind::B || op.kind == OpKind::W; }

class Runner {
 public:
  Runner(const Schedule& s, nn::Model& model, comm::Communicator& pp, const std::vector<data::Batch>& mbs,
         float grad_scale, const nn::Model::GradsReady& ready, const LocalPart& local, const RunOptions& options)
      : s_(s), model_(model), pp_(pp), mbs_(mbs), scale_(grad_scale), ready_(ready), local_(local),
        trace_(options.trace), prefetch_(options.prefetch),
        fused_pairs_(options.fused_pairs && default_device() != Device::meta),
        rows_(mbs.empty() ? 0 : model.activation_rows(mbs.front().tokens.numel() / local.parts)),
        width_(model.config().hidden_size) {}

  // A step that failed leaves receives posted early that no one will wait for: they are cancelled,
  // not waited on (their peer may have failed too).
  ~Runner() {
    for (auto& [i, posted] : posted_) posted.second->cancel();
  }

  double run() {
    const std::vector<Op>& ops = s_.ranks[size_t(pp_.rank())];
    release_ = sends_released_after(s_, pp_.rank());
    last_w_ = last_weight_pass(s_, pp_.rank());
    check_embedding_final_last();
    if (trace_) {
      trace_->clear();
      transfers_.emplace();  // the MoE all-to-alls made by each op, drawn beside it
    }
    int pair_left = 0;  // spans left in the current F&B pair (F, B, W; the sends and receives between)
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].overlapped && fused_pairs_ && fusable(i)) {
        i = run_fused_pair(i);
        continue;
      }
      if (ops[i].overlapped) pair_left = 3;
      run_op(i, pair_left > 0);
      if (is_compute(ops[i])) pair_left = std::max(0, pair_left - 1);
    }
    for (auto& [i, w] : sends_) w.second->wait();
    sends_.clear();
    TESSEL_CHECK(posted_.empty(), "pipeline executor: {} receives posted early were never consumed", posted_.size());
    return loss_;
  }

 private:
  // Op i of this rank, traced as part of an F&B pair or not; then the sends it vouches for are freed.
  // `own_transfers`: the MoE transfers recorded since the last op are this op's (not where a send is
  // posted inside a fused pair, whose transfers the pair draws itself).
  void run_op(size_t i, bool in_pair, bool own_transfers = true) {
    const Op& op = s_.ranks[size_t(pp_.rank())][i];
    current_ = i;
    if (prefetch_ && is_compute(op)) post_receives_after(i);
    const double start = trace_ ? steady_seconds() : 0;
    execute(op);
    if (trace_) {
      trace_->push_back({op.kind, op.mb, op.chunk, stage(op.chunk), in_pair, start, steady_seconds()});
      if (own_transfers)
        for (const TransferSpan& t : transfers_->take()) trace_transfer(op, in_pair, t);
    }
    release_sends_after(i);
  }

  // A transfer op made, on the op's rank (chrome_trace draws it on the rank's transfer track).
  void trace_transfer(const Op& op, bool in_pair, const TransferSpan& t) {
    trace_->push_back({op.kind, op.mb, op.chunk, stage(op.chunk), in_pair, t.start, t.end, int(t.what)});
  }

  void release_sends_after(size_t i) {
    for (const size_t send : release_[i]) {  // complete already: their receiver has moved past them
      auto it = sends_.find(send);
      // A fused pair may run its B's receive before its F's sends: a receive that vouched for one of
      // the pair's own sends could come before it (no DualPipe schedule has one; checked, not assumed).
      TESSEL_CHECK(it != sends_.end(), "pipeline executor: rank {}: op {} completes a send not made yet (an F&B pair "
                   "run fused reorders its transfers; run without parallel.overlap_moe_expert_parallel_comm)",
                   pp_.rank(), i);
      it->second.second->wait();
      sends_.erase(it);
    }
  }

  // An F&B pair runs fused where its F and B are of different chunks (DualPipe's two directions):
  // two passes of one chunk would share its layers' state. Not while a MoE routing recording is on
  // (a calibration's step): it lists the forwards in the unfused order.
  bool fusable(size_t f) const {
    const std::vector<Op>& ops = s_.ranks[size_t(pp_.rank())];
    return ops[next_compute(f)].chunk != ops[f].chunk && nn::current_moe_routing_trace() == nullptr;
  }

  // The index of this rank's first compute op after op i (validate() guarantees an F&B pair's B and W).
  size_t next_compute(size_t i) const {
    const std::vector<Op>& ops = s_.ranks[size_t(pp_.rank())];
    do ++i;
    while (!is_compute(ops[i]));
    return i;
  }

  // The F&B pair whose F is op f, run fused (RunOptions::fused_pairs): F and B interleaved at each MoE
  // all-to-all (core/paired_tasks.h), the B waiting for its input gradient (the receives between F
  // and B) in its own first turn, each pass posting its own output's send as soon as it ends (so the
  // transfer runs while the other pass still computes), then the pair's other sends, then its W.
  // Returns the index of the W. Sends are non-blocking and matched by tag (micro-batch, chunk,
  // direction), so posting one earlier only makes its receive complete sooner (under the test-only
  // TESSEL_TEST_P2P_DELAY_MS each also makes a blocking 8-byte send of its time, which MPI delivers
  // eagerly, so it does not wait on the receiver either).
  // Why this cannot deadlock: the simulator's pair rule (simulate()) starts a pair once both its
  // inputs are here, and the executor runs only schedules the simulator completes. Here the F starts
  // as soon as its own input is here and the B no later than under that rule, each rank's collectives
  // on every group keep their order (the B's receive is a point-to-point message of the pipeline
  // group), and no send is posted later: every wait ends no later than under the rule. That holds
  // because every group a pass makes collectives on (tensor, sequence, context, expert parallel)
  // lies within one pipeline stage, whose ranks run the same ops in the same order. (The
  // simulator keeps its rule and posts a pair's sends at its end: it times a fused pair no earlier
  // than it runs.)
  size_t run_fused_pair(size_t f) {
    const std::vector<Op>& ops = s_.ranks[size_t(pp_.rank())];
    const size_t b = next_compute(f), w = next_compute(b);
    for (size_t j = b + 1; j < w; ++j)
      TESSEL_CHECK(ops[j].kind == OpKind::send_fwd || ops[j].kind == OpKind::send_bwd,
                   "pipeline executor: rank {}: a receive between the B and the W of an F&B pair ({}), which a fused "
                   "pair cannot place", pp_.rank(), s_.kind);
    // The sends of F's output (send_fwd of F's micro-batch and chunk) and of B's input gradient
    // (send_bwd of B's): each posted by its pass; any other send between F and W after the pair.
    std::vector<size_t> f_sends, b_sends, later_sends;
    for (size_t j = f + 1; j < w; ++j) {
      const Op& o = ops[j];
      if (o.kind == OpKind::send_fwd && o.mb == ops[f].mb && o.chunk == ops[f].chunk) f_sends.push_back(j);
      else if (o.kind == OpKind::send_bwd && o.mb == ops[b].mb && o.chunk == ops[b].chunk) b_sends.push_back(j);
      else if (o.kind == OpKind::send_fwd || o.kind == OpKind::send_bwd) later_sends.push_back(j);
    }
    // The receives between F and B (the B's input gradient) are the B's: posted now, with or without
    // parallel.overlap_p2p_comm, and waited for in the B's own first turn, so the F's compute up to
    // its first all-to-all runs while they are in flight.
    std::vector<size_t> b_receives;
    for (size_t j = f + 1; j < b; ++j)
      if (ops[j].kind == OpKind::recv_fwd || ops[j].kind == OpKind::recv_bwd) b_receives.push_back(j);
    post_receives_after(f);
    if (prefetch_) post_receives_after(b);
    double b_inputs_here = 0;  // when the B's receives returned (steady clock; traced runs)
    const auto pass_then_sends = [&](const std::vector<size_t>& receives, size_t pass, const std::vector<size_t>& sends) {
      for (const size_t j : receives) run_op(j, true, false);
      if (trace_ && !receives.empty()) b_inputs_here = steady_seconds();
      execute(ops[pass]);
      for (const size_t j : sends) run_op(j, true, false);
    };
    std::vector<PairedTurn> turns;
    run_paired([&] { pass_then_sends({}, f, f_sends); }, [&] { pass_then_sends(b_receives, b, b_sends); },
               trace_ ? &turns : nullptr);
    if (trace_) {
      // The two passes ran in turns: each turn is drawn as a span of its pass, and each all-to-all as
      // made by the pass whose turn it started in, from its start until its wait returned (the other
      // pass's turns between are computing while it is in flight). The B's first turn began with the
      // wait for its input, drawn as the receive's span: its compute span starts where that ended.
      const auto pass_of = [&](int task) -> const Op& { return ops[task == 0 ? f : b]; };
      bool b_started = false;
      for (const PairedTurn& turn : turns) {
        const Op& op = pass_of(turn.task);
        double start = turn.start;
        if (turn.task == 1 && !b_started) {
          b_started = true;
          start = std::min(std::max(start, b_inputs_here), turn.end);
        }
        trace_->push_back({op.kind, op.mb, op.chunk, stage(op.chunk), true, start, turn.end});
      }
      for (const TransferSpan& t : transfers_->take()) {
        int task = 0;
        for (const PairedTurn& turn : turns)
          if (turn.start <= t.start) task = turn.task;
        trace_transfer(pass_of(task), true, t);
      }
    }
    release_sends_after(f);
    release_sends_after(b);
    for (const size_t j : later_sends) run_op(j, true);
    run_op(w, true);
    return w;
  }

  using Key = std::pair<int, int>;  // (micro-batch, chunk)

  int stage(int chunk) const { return s_.virtual_stage(pp_.rank(), chunk); }

  // Where one rank holds both the embedding's chunk and the head's (a V, DualPipe), a tied head and
  // multi-token prediction add to the embedding's gradient in the head chunk's W's: the embedding's
  // range is reported final at its own chunk's last W, so that must come after the head chunk's.
  void check_embedding_final_last() const {
    const nn::ModelConfig& cfg = model_.config();
    if (!ready_ || !(cfg.tie_embeddings || cfg.mtp_num_layers > 0)) return;
    int embedding = -1, head = -1;
    for (int c = 0; c < model_.num_chunks(); ++c) {
      if (model_.first_chunk_is_first_stage(c)) embedding = c;
      if (model_.chunk_is_last_stage(c)) head = c;
    }
    if (embedding < 0 || head < 0 || embedding == head) return;
    TESSEL_CHECK(last_w_[size_t(head)] < last_w_[size_t(embedding)],
                 "pipeline schedule '{}': rank {} runs its last W of the embedding's chunk before the head's, whose "
                 "W's still add to the embedding's gradient", s_.kind, pp_.rank());
  }

  void send(Tensor t, int v_to, int mb, Direction d) {
    const Where to = s_.holder(v_to, mb);
    auto w = pp_.send_async(t.device_ptr(), t.numel(), DType::f32, to.rank, tag(mb, to.chunk, s_.vpp, d));
    sends_.emplace(current_, std::make_pair(std::move(t), std::move(w)));  // the buffer lives until the send completes
  }


  // The sender and tag of receive op `op` of this rank.
  std::pair<int, int> source_of(const Op& op) const {
    const bool fwd = op.kind == OpKind::recv_fwd;
    const int v_from = stage(op.chunk) + (fwd ? -1 : 1);
    return {s_.holder(v_from, op.mb).rank, tag(op.mb, op.chunk, s_.vpp, fwd ? kForward : kBackward)};
  }

  // Posts the receives between compute op i and the next compute op, to run during op i.
  void post_receives_after(size_t i) {
    const std::vector<Op>& ops = s_.ranks[size_t(pp_.rank())];
    for (size_t j = i + 1; j < ops.size() && !is_compute(ops[j]); ++j) {
      if (ops[j].kind != OpKind::recv_fwd && ops[j].kind != OpKind::recv_bwd) continue;
      Tensor t = Tensor::empty({rows_, width_}, DType::f32);
      const auto [src, tg] = source_of(ops[j]);
      auto w = pp_.recv_async(t.device_ptr(), t.numel(), DType::f32, src, tg);
      posted_.emplace(j, std::make_pair(std::move(t), std::move(w)));
    }
  }

  // Receive op `op` (the current one): waits for it if it was posted early, else receives now.
  Tensor recv(const Op& op) {
    ProfileScope prof("pp_recv_wait");
    if (auto it = posted_.find(current_); it != posted_.end()) {
      it->second.second->wait();
      Tensor t = std::move(it->second.first);
      posted_.erase(it);
      return t;
    }
    Tensor t = Tensor::empty({rows_, width_}, DType::f32);
    const auto [src, tg] = source_of(op);
    pp_.recv(t.device_ptr(), t.numel(), DType::f32, src, tg);
    return t;
  }

  void execute(const Op& op) {
    const Key key{op.mb, op.chunk};
    MemoryPhaseScope phase(phase_of(op.kind), op.mb, op.chunk);
    const int v = stage(op.chunk);
    // Only the embedding's forward reads the tokens, and only the loss's the targets.
    const bool reads_batch =
        op.kind == OpKind::F && (model_.first_chunk_is_first_stage(op.chunk) || model_.chunk_is_last_stage(op.chunk));
    const data::Batch mb = reads_batch ? micro_batch(op.mb) : data::Batch{};
    switch (op.kind) {
      case OpKind::recv_fwd: inputs_[key] = recv(op); break;
      case OpKind::recv_bwd: grads_[key] = recv(op); break;
      case OpKind::send_fwd: send(take(outputs_, key), v + 1, op.mb, kForward); break;
      case OpKind::send_bwd: send(take(input_grads_, key), v - 1, op.mb, kBackward); break;
      case OpKind::F: {
        // The previous stage's output: received, or left by this rank's other chunk (the V's bend).
        const Tensor in = inputs_.count(key) ? take(inputs_, key) : local(outputs_, v - 1, op.mb);
        Tensor out = model_.forward_chunk(op.chunk, in, mb.tokens, mb.targets, scale_, saved_[key], &loss_);
        if (out.defined()) outputs_[key] = std::move(out);
        break;
      }
      case OpKind::B: {
        const Tensor dout = grads_.count(key) ? take(grads_, key) : local(input_grads_, v + 1, op.mb);
        Tensor din = model_.backward_chunk(op.chunk, dout, saved_[key], false);
        if (din.defined()) input_grads_[key] = std::move(din);
        break;
      }
      case OpKind::W: {
        // Gradients are final during the chunk's last weight pass.
        const bool last = current_ == last_w_[size_t(op.chunk)];
        model_.backward_weight_chunk(op.chunk, saved_[key], last ? ready_ : nullptr);
        saved_.erase(key);
        break;
      }
    }
  }

  // What stage `v` left for micro-batch mb when this rank holds that stage; else nothing (the first
  // stage's input, the last stage's output gradient).
  Tensor local(std::map<Key, Tensor>& m, int v, int mb) {
    if (v < 0 || v >= s_.stages()) return Tensor();
    const Where w = s_.holder(v, mb);
    return w.rank == pp_.rank() ? take(m, {mb, w.chunk}) : Tensor();
  }

  data::Batch micro_batch(int mb) const { return local_.cut ? local_.cut(mbs_[size_t(mb)]) : mbs_[size_t(mb)]; }

  static Tensor take(std::map<Key, Tensor>& m, const Key& k) {
    auto it = m.find(k);
    TESSEL_CHECK(it != m.end(), "pipeline executor: no tensor for micro-batch {} chunk {} (schedule out of order?)",
                 k.first, k.second);
    Tensor t = std::move(it->second);
    m.erase(it);
    return t;
  }

  const Schedule& s_;
  nn::Model& model_;
  comm::Communicator& pp_;
  const std::vector<data::Batch>& mbs_;
  float scale_;
  const nn::Model::GradsReady& ready_;
  const LocalPart& local_;
  RankTrace* trace_;
  std::optional<TransferSpanRecording> transfers_;  // while tracing
  bool prefetch_;
  bool fused_pairs_;
  int64_t rows_, width_;
  double loss_ = 0;
  std::map<Key, nn::Activations> saved_;
  std::map<Key, Tensor> inputs_, outputs_, grads_, input_grads_;
  size_t current_ = 0;  // index of the op being executed
  std::vector<size_t> last_w_;  // per chunk: index of its last W
  std::vector<std::vector<size_t>> release_;  // per op: the sends complete once it is done (sends_released_after)
  // In flight, by the index of their op, each buffer before its Work so that the Work (which waits on
  // destruction) goes first and the buffer outlives the transfer.
  std::map<size_t, std::pair<Tensor, std::unique_ptr<comm::Work>>> sends_;
  std::map<size_t, std::pair<Tensor, std::unique_ptr<comm::Work>>> posted_;  // receives posted early
};

}  // namespace

double run_schedule(const Schedule& s, nn::Model& model, comm::Communicator& pp,
                    const std::vector<data::Batch>& micro_batches, float grad_scale,
                    const nn::Model::GradsReady& ready, const LocalPart& local, const RunOptions& options) {
  TESSEL_CHECK(s.pp == pp.size() && s.vpp == model.num_chunks() && s.micro_batches == int(micro_batches.size()),
               "pipeline schedule for pp {} x vpp {} with {} micro-batches; this run has pp {}, {} chunks, {} "
               "micro-batches", s.pp, s.vpp, s.micro_batches, pp.size(), model.num_chunks(), micro_batches.size());
  // The simulator starts a pair once both its inputs are here; a fused pair's waits end no later
  // (run_fused_pair), so a schedule the simulator completes runs without deadlock (it names the
  // waiting ranks otherwise).
  if (options.fused_pairs) {
    simulate(s, Costs{});
    TESSEL_CHECK(std::string(pp.backend()) != "mpi" || comm::mpi_threads_serialized(),
                 "parallel.overlap_moe_expert_parallel_comm runs an F&B pair's two passes on two threads, one at a time, "
                 "which needs MPI_THREAD_SERIALIZED; this MPI library provides thread level {} (run without it)",
                 comm::mpi_thread_level());
  }
  return Runner(s, model, pp, micro_batches, grad_scale, ready, local, options).run();
}

double forward_only_loss(nn::Model& model, comm::Communicator& pp, const data::Batch& batch, Placement placement) {
  const int P = pp.size(), me = pp.rank();
  Schedule where{"forward", P, model.num_chunks(), 1, {}, placement};  // only its placement is used
  const Shape act{model.activation_rows(batch.tokens.numel()), model.config().hidden_size};
  double loss = 0;
  Tensor x;
  for (int v = 0; v < where.stages(); ++v) {
    const Where at = where.holder(v, 0);
    if (at.rank != me) continue;
    if (v > 0 && where.holder(v - 1, 0).rank != me) {  // else x is this rank's previous chunk's output
      x = Tensor::empty(act, DType::f32);
      pp.recv(x.device_ptr(), x.numel(), DType::f32, where.holder(v - 1, 0).rank, v);
    }
    nn::Activations dropped;
    x = model.forward_chunk(at.chunk, x, batch.tokens, batch.targets, 0.0f, dropped, &loss);
    if (v + 1 < where.stages() && where.holder(v + 1, 0).rank != me)
      pp.send(x.device_ptr(), x.numel(), DType::f32, where.holder(v + 1, 0).rank, v + 1);
  }
  return comm::sum_in_rank_order(pp, loss);
}

Schedule make_training_schedule(const std::string& kind, int pp, int vpp, int micro_batches) {
  // 1f1b with several chunks per rank runs interleaved (Megatron-LM does the same).
  Schedule s = make_schedule(kind == "1f1b" && vpp > 1 ? "interleaved" : kind, pp, vpp, micro_batches);
  validate(s);
  add_p2p(s);
  return s;
}

}  // namespace tessel::pipeline
