#include "tessel/nn/model.h"

#include "tessel/kernels/xent.h"

namespace tessel::nn {

namespace {
std::string recompute_key(size_t layer) { return "model.layers." + std::to_string(layer) + ".recompute_input"; }
}  // namespace

Model::Model(const ModelConfig& cfg, comm::Communicator* tp)
    : cfg_(cfg), tp_(tp && tp->size() > 1 ? tp : nullptr), ps_(std::make_unique<ParamStore>(cfg.compute)) {
  cfg_.validate();
  if (cfg_.is_llama())
    rope_ = std::make_shared<kernels::RopeTable>(cfg_.seq_length, cfg_.head_dim(), cfg_.rotary_base);
  // Each part's parameters are registered contiguously; the boundaries tell backward which range of
  // the flat gradient buffer is final after each part (for overlapping data-parallel reduction).
  if (tp_)
    TESSEL_CHECK(cfg_.vocab_size % tp_->size() == 0,
                 "tensor_model_parallel_size {} must divide model.vocab_size {} (the vocabulary is split)", tp_->size(),
                 cfg_.vocab_size);
  embed_ = std::make_unique<Embedding>(*ps_, cfg_, tp_);
  for (int64_t i = 0; i < cfg_.num_layers; ++i) {
    layer_begin_.push_back(ps_->numel());
    layers_.push_back(std::make_unique<TransformerLayer>(*ps_, cfg_, i, rope_, tp_));
  }
  norm_begin_ = ps_->numel();
  final_norm_ = std::make_unique<Norm>(*ps_, "model.norm", cfg_.hidden_size,
                                       cfg_.is_llama() ? Norm::Kind::rms : Norm::Kind::layer, float(cfg_.norm_epsilon));
  head_begin_ = ps_->numel();
  head_ = std::make_unique<LmHead>(*ps_, cfg_, embed_->weight_offset(), tp_);
  ps_->finalize();
}

Tensor Model::hidden(const Tensor& tokens, Activations& saved) {
  batch_ = tokens.size(0);
  Tensor x = embed_->forward(tokens, saved);
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (cfg_.recompute) {
      // Keep only the layer input; backward re-runs the layer forward to rebuild the rest.
      saved.put(recompute_key(i), x);
      Activations scratch;
      x = layers_[i]->forward(x, batch_, scratch);
    } else {
      x = layers_[i]->forward(x, batch_, saved);
    }
  }
  Tensor xf;
  return final_norm_->forward(x, Tensor(), xf, saved);
}

double Model::forward(const Tensor& tokens, const Tensor& targets, float grad_scale, Activations& saved) {
  Tensor y = hidden(tokens, saved);
  return head_->forward_loss(y, targets, grad_scale, saved);
}

void Model::backward(Activations& saved, const GradsReady& ready) {
  auto report = [&](int64_t begin, int64_t end) {
    if (ready && end > begin) ready(begin, end);
  };
  const int64_t total = ps_->numel();
  Tensor dy = head_->backward_input(saved);
  head_->backward_weight(saved);
  report(head_begin_, total);  // empty when tied: the embedding's gradient is final only at the end
  Tensor dx = final_norm_->backward(dy, Tensor(), saved);
  report(norm_begin_, head_begin_);
  for (size_t i = layers_.size(); i-- > 0;) {
    if (cfg_.recompute) {
      const Tensor input = saved.get(recompute_key(i));
      saved.erase(recompute_key(i));
      layers_[i]->forward(input, input.size(0) / cfg_.seq_length, saved);
    }
    dx = layers_[i]->backward_input(dx, saved);
    layers_[i]->backward_weight(saved);
    report(layer_begin_[i], i + 1 < layers_.size() ? layer_begin_[i + 1] : norm_begin_);
  }
  embed_->backward(dx, saved);
  report(0, layers_.empty() ? norm_begin_ : layer_begin_[0]);
}

double Model::forward_backward(const Tensor& tokens, const Tensor& targets, float grad_scale,
                               const GradsReady& ready) {
  Activations saved;
  const double loss = forward(tokens, targets, grad_scale, saved);
  backward(saved, ready);
  return loss;
}

Tensor Model::logits(const Tensor& tokens) {
  TESSEL_CHECK(!tp_, "full-vocabulary logits under tensor parallelism are not supported yet (the vocabulary is split)");
  Activations scratch;
  return head_->logits(hidden(tokens, scratch));
}

KVCache Model::make_kv_cache() const {
  TESSEL_CHECK(!tp_, "generation under tensor parallelism is not supported yet");
  KVCache c;
  for (const auto& l : layers_) {
    c.k.push_back(Tensor::zeros({cfg_.seq_length, l->kv_width()}, DType::f32));
    c.v.push_back(Tensor::zeros({cfg_.seq_length, l->kv_width()}, DType::f32));
  }
  return c;
}

Tensor Model::decode(const Tensor& tokens, KVCache& cache) {
  const int64_t n = tokens.numel();
  TESSEL_CHECK(n > 0, "decode: no tokens");
  TESSEL_CHECK(cache.length + n <= cfg_.seq_length,
               "{} tokens do not fit the context: {} already decoded, model.seq_length is {}", n, cache.length,
               cfg_.seq_length);
  Tensor x = embed_->forward_at(tokens, cache.length);
  for (size_t i = 0; i < layers_.size(); ++i) x = layers_[i]->forward_decode(x, cache.length, cache.k[i], cache.v[i]);
  cache.length += n;
  Activations scratch;
  Tensor xf;
  Tensor last = x.slice(0, n - 1, n).clone();
  Tensor y = final_norm_->forward(last, Tensor(), xf, scratch);
  return head_->logits(y).reshape({cfg_.vocab_size});
}

double Model::loss_sum(const Tensor& tokens, const Tensor& targets) {
  Activations scratch;
  return head_->loss_sum(hidden(tokens, scratch), targets);
}

}  // namespace tessel::nn
