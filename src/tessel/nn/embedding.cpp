#include "tessel/nn/embedding.h"

#include "tessel/core/profiler.h"
#include "tessel/kernels/embedding.h"
#include "tessel/nn/context_parallel.h"
#include "tessel/nn/sequence_parallel.h"
#include "tessel/nn/vocab_parallel.h"

namespace tessel::nn {

Embedding::Embedding(ParamStore& ps, const ModelConfig& cfg, comm::Communicator* tp, comm::Communicator* cp)
    : ps_(&ps),
      V_(cfg.vocab_size),
      D_(cfg.hidden_size),
      T_(cfg.seq_length),
      cp_(cp && cp->size() > 1 ? cp : nullptr),
      T_local_(cfg.seq_length / (cp_ ? cp_->size() : 1)),
      V_local_(cfg.vocab_size) {
  if (tp && tp->size() > 1) {
    tp_ = tp;
    w_offset_ = ps.add_shard("model.embed_tokens.weight", {V_, D_}, 0, tp->rank(), tp->size(), Init::normal,
                             float(cfg.init_method_std), true);
    V_local_ = V_ / tp->size();
    sequence_parallel_ = cfg.sequence_parallel;
    vocab_begin_ = V_local_ * tp->rank();
  } else {
    w_offset_ = ps.add("model.embed_tokens.weight", {V_, D_}, Init::normal, float(cfg.init_method_std), true);
  }
  // Looked up in fp32 (the tied head reads the compute copy), or with precision.fp32_embedding off from
  // the compute copy: then a store with sharded masters keeps no whole fp32 copy of the table.
  lookup_in_compute_ = cfg.embedding_in_compute_dtype();
  if (!lookup_in_compute_) ps.mark_f32_compute(w_offset_);
  if (!cfg.is_llama()) {
    pos_offset_ = ps.add("model.embed_positions.weight", {T_, D_}, Init::normal, float(cfg.init_method_std), true);
    ps.mark_f32_compute(pos_offset_);
  }
}

int64_t Embedding::first_row(int64_t rows) const {
  // The micro-batch row of this rank's first output row (sequence parallelism: rank r's share).
  return sequence_parallel_ ? rows * tp_->rank() : 0;
}

int64_t Embedding::position(int64_t row) const {
  const int64_t t = row % T_local_;
  return cp_ ? cp_global_position(t, T_, cp_->rank(), cp_->size()) : t;
}

Tensor Embedding::position_index(int64_t rows) const {
  // Row n's position, computed on the host and copied to the device as one index tensor.
  const int64_t first = first_row(rows);
  Tensor index = Tensor::empty({rows}, DType::i64, ps_->grads_flat().device());
  if (index.is_meta()) return index;
  const DeviceAccessScope copy_to_device;
  int64_t* p = index.data<int64_t>();
  for (int64_t n = 0; n < rows; ++n) p[n] = position(first + n);
  return index;
}

void Embedding::add_positions(Tensor& out) const {
  kernels::add_gathered_rows(position_index(out.size(0)), positions(), out);
}

void Embedding::add_position_grads(const Tensor& dout) {
  // Under sequence parallelism this rank's rows only (the trainer sums the group's).
  kernels::embedding_backward(position_index(dout.size(0)), dout, ps_->grad_at(pos_offset_, {T_, D_}), Tensor(), T_);
}

Tensor Embedding::forward(const Tensor& tokens, Activations& saved, const std::string& tag) const {
  ProfileScope prof("embedding");
  TESSEL_CHECK(tokens.dim() == 2 && tokens.size(1) == T_local_ && tokens.dtype() == DType::i64,
               "embedding: tokens must be i64 [batch, {}], got {}", T_local_, tokens.str());
  const int64_t N = tokens.numel();
  saved.put(key_tokens_ + tag, tokens);
  if (!tp_ && !cp_) {  // one fused kernel: token rows plus positions (row n at position n % T)
    Tensor out = Tensor::empty({N, D_}, DType::f32);
    kernels::embedding_forward(tokens, table(), positions(), T_, out);
    return out;
  }
  Tensor out;
  if (tp_) {
    kernels::check_ids(tokens, V_, false, "token id", "embedding");
    out = vocab_parallel_embedding_partial(tokens, table(), vocab_begin_);
    if (sequence_parallel_)
      out = sequence_reduce_scatter(out, *tp_);  // this rank's rows of the sum
    else
      tp_->all_reduce(out.device_ptr(), out.numel(), DType::f32, comm::ReduceOp::sum);
  } else {
    out = Tensor::empty({N, D_}, DType::f32);
    kernels::embedding_forward(tokens, table(), Tensor(), T_, out);
  }
  if (pos_offset_ >= 0) add_positions(out);
  return out;
}

Tensor Embedding::forward_at(const Tensor& tokens, int64_t pos0) const {
  TESSEL_CHECK(!tp_, "generation under tensor parallelism is not supported yet");
  const int64_t n = tokens.numel();
  TESSEL_CHECK(pos0 >= 0 && pos0 + n <= T_, "positions {}..{} exceed the context of {} tokens (model.seq_length)", pos0,
               pos0 + n - 1, T_);
  Tensor out = Tensor::empty({n, D_}, DType::f32);
  // Row i gets position (pos0 + i) % T_ = pos0 + i: the position rows from pos0 on.
  const Tensor pos = pos_offset_ >= 0 ? positions().slice(0, pos0, T_) : Tensor();
  kernels::embedding_forward(tokens, table(), pos, T_ - pos0, out);
  return out;
}

void Embedding::backward(const Tensor& dout, Activations& saved, const std::string& tag) {
  ProfileScope prof("embedding");
  const Tensor& tokens = saved.get(key_tokens_ + tag);
  if (!tp_ && !cp_) {
    kernels::embedding_backward(tokens, dout, ps_->grad_at(w_offset_, {V_, D_}),
                                pos_offset_ >= 0 ? ps_->grad_at(pos_offset_, {T_, D_}) : Tensor(), T_);
  } else {
    if (tp_) {
      Tensor dw = ps_->grad_at(w_offset_, {V_local_, D_});
      vocab_parallel_embedding_backward(tokens, sequence_parallel_ ? sequence_all_gather(dout, *tp_) : dout,
                                        vocab_begin_, dw);
    } else {
      kernels::embedding_backward(tokens, dout, ps_->grad_at(w_offset_, {V_, D_}), Tensor(), T_);
    }
    if (pos_offset_ >= 0) add_position_grads(dout);
  }
  saved.erase(key_tokens_ + tag);
}

}  // namespace tessel::nn
