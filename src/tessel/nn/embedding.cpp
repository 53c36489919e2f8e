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

void Embedding::backward(const Tensor& dout, Activations& saved) const {
  ProfileScope prof("embedding");
  const Tensor& tokens = saved.get(key_tokens_);
  kernels::embedding_bwd(tokens.numel(), D_, tokens.data<int64_t>(), dout.data<float>(),
                         ps_.grads_data() + w_offset_, pos_offset_ >= 0 ? ps_.grads_data() + pos_offset_ : nullptr,
                         T_);
  saved.erase(key_tokens_);
}

}  // namespace tessel::nn
