#include "tessel/nn/embedding.h"

#include "tessel/core/profiler.h"
#include "tessel/kernels/embedding.h"

namespace tessel::nn {

Embedding::Embedding(ParamStore& ps, const ModelConfig& cfg)
    : ps_(ps), V_(cfg.vocab_size), D_(cfg.hidden_size), T_(cfg.seq_length) {
  w_offset_ = ps.add("model.embed_tokens.weight", {V_, D_}, Init::normal, float(cfg.init_method_std), true);
  if (!cfg.is_llama())
    pos_offset_ = ps.add("model.embed_positions.weight", {T_, D_}, Init::normal, float(cfg.init_method_std), true);
}

Tensor Embedding::forward(const Tensor& tokens, Activations& saved) const {
  ProfileScope prof("embedding");
  TESSEL_CHECK(tokens.dim() == 2 && tokens.size(1) == T_ && tokens.dtype() == DType::i64,
               "embedding: tokens must be i64 [batch, {}], got {}", T_, tokens.str());
  const int64_t N = tokens.numel();
  Tensor out = Tensor::empty({N, D_}, DType::f32);
  kernels::embedding_fwd(N, D_, V_, tokens.data<int64_t>(), ps_.params_data() + w_offset_,
                         pos_offset_ >= 0 ? ps_.params_data() + pos_offset_ : nullptr, T_, out.data<float>());
  saved.put(key_tokens_, tokens);
  return out;
}

Tensor Embedding::forward_at(const Tensor& tokens, int64_t pos0) const {
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
  kernels::embedding_bwd(tokens.numel(), D_, tokens.data<int64_t>(), dout.data<float>(),
                         ps_.grads_data() + w_offset_, pos_offset_ >= 0 ? ps_.grads_data() + pos_offset_ : nullptr,
                         T_);
  saved.erase(key_tokens_);
}

}  // namespace tessel::nn
