#include "tessel/nn/embedding.h"

#include "tessel/core/profiler.h"
#include "tessel/kernels/embedding.h"
#include "tessel/nn/vocab_parallel.h"

namespace tessel::nn {

Embedding::Embedding(ParamStore& ps, const ModelConfig& cfg, comm::Communicator* tp)
    : ps_(ps), V_(cfg.vocab_size), D_(cfg.hidden_size), T_(cfg.seq_length), V_local_(cfg.vocab_size) {
  if (tp && tp->size() > 1) {
    tp_ = tp;
    w_offset_ = ps.add_shard("model.embed_tokens.weight", {V_, D_}, 0, tp->rank(), tp->size(), Init::normal,
                             float(cfg.init_method_std), true);
    V_local_ = V_ / tp->size();
    vocab_begin_ = V_local_ * tp->rank();
  } else {
    w_offset_ = ps.add("model.embed_tokens.weight", {V_, D_}, Init::normal, float(cfg.init_method_std), true);
  }
  if (!cfg.is_llama())
    pos_offset_ = ps.add("model.embed_positions.weight", {T_, D_}, Init::normal, float(cfg.init_method_std), true);
}

Tensor Embedding::forward(const Tensor& tokens, Activations& saved) const {
  ProfileScope prof("embedding");
  TESSEL_CHECK(tokens.dim() == 2 && tokens.size(1) == T_ && tokens.dtype() == DType::i64,
               "embedding: tokens must be i64 [batch, {}], got {}", T_, tokens.str());
  const int64_t N = tokens.numel();
  Tensor out = Tensor::empty({N, D_}, DType::f32);
  if (tp_) {
    for (int64_t i = 0; i < N; ++i)
      TESSEL_CHECK(tokens.data<int64_t>()[i] >= 0 && tokens.data<int64_t>()[i] < V_,
                   "token id {} at position {} is outside the vocabulary [0, {})", tokens.data<int64_t>()[i], i, V_);
    vocab_parallel_embedding(tokens, ps_.param_at(w_offset_, {V_local_, D_}), vocab_begin_, out, *tp_);
    if (pos_offset_ >= 0) {
      const float* pos = ps_.params_data() + pos_offset_;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t j = 0; j < D_; ++j) out.data<float>()[n * D_ + j] += pos[(n % T_) * D_ + j];
    }
    saved.put(key_tokens_, tokens);
    return out;
  }
  kernels::embedding_fwd(N, D_, V_, tokens.data<int64_t>(), ps_.params_data() + w_offset_,
                         pos_offset_ >= 0 ? ps_.params_data() + pos_offset_ : nullptr, T_, out.data<float>());
  saved.put(key_tokens_, tokens);
  return out;
}

Tensor Embedding::forward_at(const Tensor& tokens, int64_t pos0) const {
  TESSEL_CHECK(!tp_, "generation under tensor parallelism is not supported yet");
  const int64_t n = tokens.numel();
  TESSEL_CHECK(pos0 >= 0 && pos0 + n <= T_, "positions {}..{} exceed the context of {} tokens (model.seq_length)", pos0,
               pos0 + n - 1, T_);
  Tensor out = Tensor::empty({n, D_}, DType::f32);
  // Row i gets position (pos0 + i) % T_ = pos0 + i: pass the position table shifted by pos0.
  const float* pos = pos_offset_ >= 0 ? ps_.params_data() + pos_offset_ + pos0 * D_ : nullptr;
  kernels::embedding_fwd(n, D_, V_, tokens.data<int64_t>(), ps_.params_data() + w_offset_, pos, T_, out.data<float>());
  return out;
}

void Embedding::backward(const Tensor& dout, Activations& saved) const {
  ProfileScope prof("embedding");
  const Tensor& tokens = saved.get(key_tokens_);
  if (tp_) {
    Tensor dw = ps_.grad_at(w_offset_, {V_local_, D_});
    vocab_parallel_embedding_backward(tokens, dout, vocab_begin_, dw);
    if (pos_offset_ >= 0) {
      float* dpos = ps_.grads_data() + pos_offset_;
      for (int64_t n = 0; n < tokens.numel(); ++n)
        for (int64_t j = 0; j < D_; ++j) dpos[(n % T_) * D_ + j] += dout.data<float>()[n * D_ + j];
    }
    saved.erase(key_tokens_);
    return;
  }
  kernels::embedding_bwd(tokens.numel(), D_, tokens.data<int64_t>(), dout.data<float>(),
                         ps_.grads_data() + w_offset_, pos_offset_ >= 0 ? ps_.grads_data() + pos_offset_ : nullptr,
                         T_);
  saved.erase(key_tokens_);
}

}  // namespace tessel::nn
