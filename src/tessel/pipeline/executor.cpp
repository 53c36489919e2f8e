#include "tessel/pipeline/executor.h"

#include <map>
#include <memory>
#include <utility>

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

class Runner {
 public:
  Runner(const Schedule& s, nn::Model& model, comm::Communicator& pp, const std::vector<data::Batch>& mbs,
         float grad_scale, const nn::Model::GradsReady& ready)
      : s_(s), model_(model), pp_(pp), mbs_(mbs), scale_(grad_scale), ready_(ready),
        rows_(mbs.empty() ? 0 : model.activation_rows(mbs.front().tokens.numel())),
        width_(model.config().hidden_size) {}

  double run() {
    for (const Op& op : s_.ranks[size_t(pp_.rank())]) execute(op);
    for (auto& w : sends_) w.first->wait();
    sends_.clear();
    return loss_;
  }

 private:
  using Key = std::pair<int, int>;  // (micro-batch, chunk)

  int stage(int chunk) const { return s_.virtual_stage(pp_.rank(), chunk); }

  void send(Tensor t, int v_to, int mb, Direction d) {
    const Place to = place(s_, v_to);
    auto w = pp_.send_async(t.device_ptr(), t.numel(), DType::f32, to.rank, tag(mb, to.chunk, s_.vpp, d));
    sends_.emplace_back(std::move(w), std::move(t));  // the buffer lives until the send completes
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
    const data::Batch& mb = mbs_[size_t(op.mb)];
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
  int64_t rows_, width_;
  double loss_ = 0;
  std::map<Key, nn::Activations> saved_;
  std::map<Key, Tensor> inputs_, outputs_, grads_, input_grads_;
  std::vector<std::pair<std::unique_ptr<comm::Work>, Tensor>> sends_;
};

}  // namespace

double run_schedule(const Schedule& s, nn::Model& model, comm::Communicator& pp,
                    const std::vector<data::Batch>& micro_batches, float grad_scale,
                    const nn::Model::GradsReady& ready) {
  TESSEL_CHECK(s.pp == pp.size() && s.vpp == model.num_chunks() && s.micro_batches == int(micro_batches.size()),
               "pipeline schedule for pp {} x vpp {} with {} micro-batches; this run has pp {}, {} chunks, {} "
               "micro-batches", s.pp, s.vpp, s.micro_batches, pp.size(), model.num_chunks(), micro_batches.size());
  return Runner(s, model, pp, micro_batches, grad_scale, ready).run();
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
