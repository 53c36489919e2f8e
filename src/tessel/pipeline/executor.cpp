#include "tessel/pipeline/executor.h"

#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "tessel/core/profiler.h"

namespace tessel::pipeline {

namespace {

enum Direction { kForward = 0, kBackward = 1 };

int tag(int mb, int chunk, int vpp, Direction d) { return (mb * vpp + chunk) * 2 + int(d); }

// Where virtual stage v lives: rank v % P, chunk v / P.
struct Place {
  int rank, chunk;
};
Place place(const Schedule& s, int v) { return {v % s.pp, v / s.pp}; }

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
  const Place to = place(s, s.virtual_stage(me, op.chunk) + (fwd ? 1 : -1));
  return {to.rank, {fwd ? OpKind::recv_fwd : OpKind::recv_bwd, op.mb, to.chunk}};
}
Peer sender_of(const Schedule& s, int me, const Op& op) {
  const bool fwd = op.kind == OpKind::recv_fwd;
  const Place from = place(s, s.virtual_stage(me, op.chunk) + (fwd ? -1 : 1));
  return {from.rank, {fwd ? OpKind::send_fwd : OpKind::send_bwd, op.mb, from.chunk}};
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

class Runner {
 public:
  Runner(const Schedule& s, nn::Model& model, comm::Communicator& pp, const std::vector<data::Batch>& mbs,
         float grad_scale, const nn::Model::GradsReady& ready, const LocalPart& local)
      : s_(s), model_(model), pp_(pp), mbs_(mbs), scale_(grad_scale), ready_(ready), local_(local),
        rows_(mbs.empty() ? 0 : model.activation_rows(mbs.front().tokens.numel() / local.parts)),
        width_(model.config().hidden_size) {}

  double run() {
    const std::vector<Op>& ops = s_.ranks[size_t(pp_.rank())];
    const std::vector<std::vector<size_t>> release = sends_released_after(s_, pp_.rank());
    for (size_t i = 0; i < ops.size(); ++i) {
      current_ = i;
      execute(ops[i]);
      for (const size_t send : release[i]) {  // complete already: their receiver has moved past them
        auto it = sends_.find(send);
        it->second.first->wait();
        sends_.erase(it);
      }
    }
    for (auto& [i, w] : sends_) w.first->wait();
    sends_.clear();
    return loss_;
  }

 private:
  using Key = std::pair<int, int>;  // (micro-batch, chunk)

  int stage(int chunk) const { return s_.virtual_stage(pp_.rank(), chunk); }

  void send(Tensor t, int v_to, int mb, Direction d) {
    const Place to = place(s_, v_to);
    auto w = pp_.send_async(t.device_ptr(), t.numel(), DType::f32, to.rank, tag(mb, to.chunk, s_.vpp, d));
    sends_.emplace(current_, std::make_pair(std::move(w), std::move(t)));  // the buffer lives until the send completes
  }

  Tensor recv(int v_from, int mb, int chunk, Direction d) {
    Tensor t = Tensor::empty({rows_, width_}, DType::f32);
    ProfileScope prof("pp_recv_wait");
    pp_.recv(t.device_ptr(), t.numel(), DType::f32, place(s_, v_from).rank, tag(mb, chunk, s_.vpp, d));
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
      case OpKind::recv_fwd: inputs_[key] = recv(v - 1, op.mb, op.chunk, kForward); break;
      case OpKind::recv_bwd: grads_[key] = recv(v + 1, op.mb, op.chunk, kBackward); break;
      case OpKind::send_fwd: send(take(outputs_, key), v + 1, op.mb, kForward); break;
      case OpKind::send_bwd: send(take(input_grads_, key), v - 1, op.mb, kBackward); break;
      case OpKind::F: {
        const Tensor in = inputs_.count(key) ? take(inputs_, key) : Tensor();
        Tensor out = model_.forward_chunk(op.chunk, in, mb.tokens, mb.targets, scale_, saved_[key], &loss_);
        if (out.defined()) outputs_[key] = std::move(out);
        break;
      }
      case OpKind::B: {
        const Tensor dout = grads_.count(key) ? take(grads_, key) : Tensor();
        Tensor din = model_.backward_chunk(op.chunk, dout, saved_[key], false);
        if (din.defined()) input_grads_[key] = std::move(din);
        break;
      }
      case OpKind::W: {
        // Gradients are final during the last micro-batch's weight pass of each chunk.
        const bool last = op.mb + 1 == s_.micro_batches;
        model_.backward_weight_chunk(op.chunk, saved_[key], last ? ready_ : nullptr);
        saved_.erase(key);
        break;
      }
    }
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
  int64_t rows_, width_;
  double loss_ = 0;
  std::map<Key, nn::Activations> saved_;
  std::map<Key, Tensor> inputs_, outputs_, grads_, input_grads_;
  size_t current_ = 0;  // index of the op being executed
  std::map<size_t, std::pair<std::unique_ptr<comm::Work>, Tensor>> sends_;  // by the index of their send op
};

}  // namespace

double run_schedule(const Schedule& s, nn::Model& model, comm::Communicator& pp,
                    const std::vector<data::Batch>& micro_batches, float grad_scale,
                    const nn::Model::GradsReady& ready, const LocalPart& local) {
  TESSEL_CHECK(s.pp == pp.size() && s.vpp == model.num_chunks() && s.micro_batches == int(micro_batches.size()),
               "pipeline schedule for pp {} x vpp {} with {} micro-batches; this run has pp {}, {} chunks, {} "
               "micro-batches", s.pp, s.vpp, s.micro_batches, pp.size(), model.num_chunks(), micro_batches.size());
  return Runner(s, model, pp, micro_batches, grad_scale, ready, local).run();
}

double forward_only_loss(nn::Model& model, comm::Communicator& pp, const data::Batch& batch) {
  const int P = pp.size(), V = model.num_chunks(), me = pp.rank();
  const Shape act{model.activation_rows(batch.tokens.numel()), model.config().hidden_size};
  double loss = 0;
  Tensor x;
  for (int v = 0; v < P * V; ++v) {
    if (v % P != me) continue;
    if (v > 0) {
      x = Tensor::empty(act, DType::f32);
      pp.recv(x.device_ptr(), x.numel(), DType::f32, (v - 1) % P, v);
    }
    nn::Activations dropped;
    x = model.forward_chunk(v / P, x, batch.tokens, batch.targets, 0.0f, dropped, &loss);
    if (v + 1 < P * V) pp.send(x.device_ptr(), x.numel(), DType::f32, (v + 1) % P, v + 1);
  }
  return comm::sum_in_rank_order(pp, loss);
}

Schedule make_training_schedule(int pp, int vpp, int micro_batches) {
  Schedule s = vpp > 1 ? make_interleaved_1f1b(pp, vpp, micro_batches) : make_1f1b(pp, micro_batches);
  add_p2p(s);
  return s;
}

}  // namespace tessel::pipeline
