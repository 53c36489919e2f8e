#include "tessel/nn/model.h"

#include <algorithm>

#include "tessel/kernels/cast.h"
#include "tessel/kernels/embedding.h"
#include "tessel/kernels/xent.h"
#include "tessel/nn/context_parallel.h"
#include "tessel/nn/fp8.h"
#include "tessel/nn/moe.h"
#include "tessel/nn/sequence_parallel.h"

namespace tessel::nn {

namespace {
std::string recompute_key(size_t layer) { return "model.layers." + std::to_string(layer) + ".recompute_input"; }
const char* kEmbeddingGrad = "model.embed_tokens.dout";  // the embedding's output gradient, kept from B for W
}  // namespace

Model::Model(const ModelConfig& cfg, comm::Communicator* tp, const StagePlan& plan, comm::Communicator* cp,
             comm::Communicator* ep, MasterShard master_shard, MasterShard expert_shard)
    : cfg_(cfg),
      plan_(plan.chunks.empty() ? whole_model_plan(cfg) : plan),
      tp_(tp && tp->size() > 1 ? tp : nullptr),
      cp_(cp && cp->size() > 1 ? cp : nullptr),
      local_seq_(cfg.seq_length),
      ps_(std::make_unique<ParamStore>(cfg.compute)) {
  cfg_.validate();
  if (cp_) {
    TESSEL_CHECK(cfg_.seq_length % (2 * cp_->size()) == 0,
                 "model.seq_length {} must be divisible by 2 x context_parallel_size = {} (each rank holds two "
                 "load-balanced chunks of every sequence)", cfg_.seq_length, 2 * cp_->size());
    local_seq_ = cfg_.seq_length / cp_->size();
  }
  if (cfg_.is_llama())
    rope_ = kernels::RopeTable::shared(cfg_.seq_length, cfg_.mla() ? cfg_.qk_pos_emb_head_dim : cfg_.head_dim(),
                                       cfg_.rotary_base);
  if (tp_)
    TESSEL_CHECK(cfg_.vocab_size % tp_->size() == 0,
                 "tensor_model_parallel_size {} must divide model.vocab_size {} (the vocabulary is split)", tp_->size(),
                 cfg_.vocab_size);
  // Each part's parameters are registered contiguously; the boundaries tell backward which range of
  // the flat gradient buffer is final after each part (for overlapping data-parallel reduction).
  // Names carry global layer indices, so pipeline stages together hold the whole model's names.
  if (plan_.has_embedding) embed_ = std::make_unique<Embedding>(*ps_, cfg_, tp_, cp_);
  if (cfg_.fp8.enabled()) {
    fp8_ = std::make_unique<Fp8State>(cfg_.fp8);
    fp8_->set_amax_group(tp_);
  }
  for (const LayerRange& r : plan_.chunks) {
    TESSEL_CHECK(0 <= r.begin && r.begin < r.end && r.end <= cfg_.num_layers,
                 "pipeline chunk layers [{}, {}) outside the model's {} layers", r.begin, r.end, cfg_.num_layers);
    chunk_first_.push_back(layers_.size());
    for (int64_t i = r.begin; i < r.end; ++i) {
      // FP8 for the transformer layers' Linears, but those kept in bf16 at either end of the stack;
      // embedding, head, norms and the attention core stay in the compute dtype (DeepSeek-V3).
      const bool bf16_end = i < cfg_.fp8.bf16_layers_at_start || i >= cfg_.num_layers - cfg_.fp8.bf16_layers_at_end;
      ps_->set_fp8(bf16_end ? nullptr : fp8_.get());
      layer_begin_.push_back(ps_->numel());
      layers_.push_back(std::make_unique<TransformerLayer>(*ps_, cfg_, i, rope_, tp_, cp_, ep));
    }
  }
  ps_->set_fp8(nullptr);
  layers_end_ = ps_->numel();
  if (cfg_.mtp_num_layers > 0 && plan_.has_head && !embed_) {
    // Multi-token prediction on a last stage without the embedding: a copy (same name and values,
    // gradients summed with the first stage's over the embedding group, like a tied head's).
    embed_copy_ = std::make_unique<Embedding>(*ps_, cfg_, tp_, cp_);
    ps_->mark_tied_copy(embed_copy_->weight_offset());
  }
  if (plan_.has_head) {
    final_norm_ = std::make_unique<Norm>(*ps_, "model.norm", cfg_.hidden_size,
                                         cfg_.is_llama() ? Norm::Kind::rms : Norm::Kind::layer,
                                         float(cfg_.norm_epsilon));
    head_begin_ = ps_->numel();
    const Embedding* shared = embed_ ? embed_.get() : embed_copy_.get();
    head_ = std::make_unique<LmHead>(*ps_, cfg_, shared ? shared->weight_offset() : -1, tp_);
    head_end_ = ps_->numel();
  }
  mtp_begin_ = ps_->numel();
  if (cfg_.mtp_num_layers > 0 && plan_.has_head)  // on the last pipeline stage, with the head
    mtp_ = std::make_unique<MultiTokenPrediction>(*ps_, cfg_, rope_, tp_, cp_, ep);
  mtp_end_ = ps_->numel();
  ps_->finalize(master_shard, expert_shard);
  for (const auto& s : ps_->specs())
    if (s.replicas > 1) {  // every replicated key/value slice is shared by the same ranks
      // By a rule for every rank (split_by), so that the meta communicator can form it too.
      const int replicas = int(s.replicas);
      kv_replicas_ = tp_->split_by([replicas](int r) { return std::make_pair(r / replicas, r); });
      break;
    }
}


template <class Self, class Fn>
void Model::for_each_moe_of(Self& self, Fn&& fn) {
  const StagePlan& plan = self.plan_;
  for (size_t c = 0; c < plan.chunks.size(); ++c)
    for (int64_t i = plan.chunks[c].begin; i < plan.chunks[c].end; ++i)
      if (auto* m = self.layers_[self.chunk_first_[c] + size_t(i - plan.chunks[c].begin)]->moe()) fn(i, *m);
  for (size_t k = 0; self.mtp_ && k < self.mtp_->depth(); ++k)
    if (auto* m = self.mtp_->layer(k).moe()) fn(self.cfg_.num_layers + int64_t(k), *m);
}

template <class Fn>
void Model::for_each_moe(Fn&& fn) {
  for_each_moe_of(*this, std::forward<Fn>(fn));
}

template <class Fn>
void Model::for_each_moe(Fn&& fn) const {
  for_each_moe_of(*this, std::forward<Fn>(fn));
}

std::vector<double> Model::moe_end_step(const std::vector<comm::Communicator*>& groups) {
  std::vector<double> ratio(static_cast<size_t>(cfg_.num_layers + cfg_.mtp_num_layers), 0.0);
  for_each_moe([&](int64_t index, Moe& m) { ratio[size_t(index)] = m.end_step(groups); });
  return ratio;
}

double Model::moe_take_aux_loss() {
  double a = 0;
  for_each_moe([&](int64_t, Moe& m) { a += m.take_aux_loss(); });
  return a;
}

std::vector<std::pair<std::string, Tensor>> Model::state_tensors() const {
  const DeviceAccessScope host_copy;  // host state (expert biases, FP8 histories) into tensors
  std::vector<std::pair<std::string, Tensor>> out;
  if (fp8_) out = fp8_->state_tensors();
  if (cfg_.moe_router_enable_expert_bias)
    for_each_moe([&](int64_t, const Moe& m) {
      Tensor b = Tensor::empty({int64_t(m.expert_bias().size())}, DType::f32);
      std::copy(m.expert_bias().begin(), m.expert_bias().end(), b.data<float>());
      out.emplace_back(m.prefix() + ".expert_bias", b);
    });
  return out;
}

std::vector<std::string> Model::load_state_tensors(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  const DeviceAccessScope host_copy;  // tensors back into host state
  std::vector<std::string> missing;
  if (fp8_ && cfg_.fp8.kind == Fp8Recipe::Kind::delayed && !fp8_->load_state(tensors))
    missing.push_back("FP8 delayed-scaling state");
  if (cfg_.moe_router_enable_expert_bias)
    for_each_moe([&](int64_t, Moe& m) {
      const std::string name = m.prefix() + ".expert_bias";
      auto it = std::find_if(tensors.begin(), tensors.end(), [&](const auto& p) { return p.first == name; });
      if (it == tensors.end() || it->second.numel() != int64_t(m.expert_bias().size())) {
        missing.push_back(name);
        return;
      }
      std::copy(it->second.data<float>(), it->second.data<float>() + it->second.numel(), m.expert_bias().begin());
    });
  return missing;
}

void Model::reduce_tensor_parallel_grads() {
  if (tp_ && cfg_.sequence_parallel)
    sum_grads(*ps_, *tp_, [](const ParamSpec& s) { return s.shape == s.global_shape; });
  if (kv_replicas_) sum_grads(*ps_, *kv_replicas_, [](const ParamSpec& s) { return s.replicas > 1; });
}

int64_t Model::sequence_split() const { return tp_ && cfg_.sequence_parallel ? tp_->size() : 1; }

int64_t Model::activation_rows(int64_t tokens) const {
  return tp_ && cfg_.sequence_parallel ? sequence_shard_rows(tokens, tp_->size()) : tokens;
}

int64_t Model::batch_of(int64_t rows) const { return rows * sequence_split() / local_seq_; }

void Model::require_whole(const char* what) const {
  TESSEL_CHECK(plan_.whole(), "{} needs the whole model; this pipeline stage holds part of it", what);
}

void Model::report(const GradsReady& ready, int64_t begin, int64_t end) const {
  if (ready && end > begin) ready(begin, end);
}

void Model::need(int64_t begin, int64_t end) const {
  if (params_needed_ && end > begin) params_needed_(begin, end);
}

std::vector<std::pair<int64_t, int64_t>> Model::forward_order_ranges() const {
  std::vector<std::pair<int64_t, int64_t>> out;
  const auto add = [&](int64_t b, int64_t e) {
    if (e > b) out.emplace_back(b, e);
  };
  add(0, layers_.empty() ? layers_end_ : layer_begin_[0]);
  for (size_t l = 0; l < layers_.size(); ++l) add(layer_begin_[l], layer_end(l));
  add(layers_end_, ps_->numel());
  return out;
}

// Evaluation forward of the whole model up to the final norm's output.
Tensor Model::hidden(const Tensor& tokens, Activations& saved) {
  require_whole("Model::hidden");
  const Fp8State::Evaluation evaluating(fp8_.get());  // leaves the FP8 histories as training has them
  need(0, layers_.empty() ? layers_end_ : layer_begin_[0]);
  Tensor x = embed_->forward(tokens, saved);
  const int64_t batch = tokens.size(0);
  for (size_t i = 0; i < layers_.size(); ++i) {
    need(layer_begin_[i], layer_end(i));
    Activations dropped;  // evaluation only: nothing is kept for a backward
    x = layers_[i]->forward(x, batch, dropped);
  }
  need(layers_end_, ps_->numel());
  Tensor xf;
  return final_norm_->forward(x, Tensor(), xf, saved);
}

Tensor Model::forward_chunk(int chunk, const Tensor& input, const Tensor& tokens, const Tensor& targets,
                            float grad_scale, Activations& saved, double* loss) {
  TESSEL_CHECK(chunk >= 0 && chunk < num_chunks(), "chunk {} outside [0, {})", chunk, num_chunks());
  MemoryPhaseScope phase("forward");
  // grad_scale 0: an evaluation forward (MoE layers count no statistics either), which leaves the
  // FP8 histories as training has them.
  const Fp8State::Evaluation evaluating(grad_scale > 0 ? nullptr : fp8_.get());
  if (first_chunk_is_first_stage(chunk)) need(0, layers_.empty() ? layers_end_ : layer_begin_[0]);
  Tensor x = first_chunk_is_first_stage(chunk) ? embed_->forward(tokens, saved) : input;
  const int64_t batch = batch_of(x.size(0));
  const size_t first = chunk_first_[size_t(chunk)];
  const size_t end = first + size_t(plan_.chunks[size_t(chunk)].size());
  for (size_t i = first; i < end; ++i) {
    MemoryLayerScope at{static_cast<int>(i)};
    need(layer_begin_[i], layer_end(i));
    if (cfg_.recompute) {
      // Keep only the layer input (and the loss scale MoE layers weigh their auxiliary losses by);
      // backward re-runs the layer forward to rebuild the rest.
      saved.put(recompute_key(i), x);
      saved.put_scalar(recompute_key(i) + ".grad_scale", grad_scale);
      Activations scratch;
      x = layers_[i]->forward(x, batch, scratch, grad_scale);
    } else {
      x = layers_[i]->forward(x, batch, saved, grad_scale);
    }
  }
  if (!chunk_is_last_stage(chunk)) return x;
  need(layers_end_, ps_->numel());
  MemoryPhaseScope head_phase("forward: final norm, output head and loss");
  Tensor xf;
  const Tensor y = final_norm_->forward(x, Tensor(), xf, saved);
  *loss += head_->forward_loss(y, targets, grad_scale, saved);
  if (mtp_ && grad_scale > 0)  // not in evaluation
    mtp_->forward(x, targets, grad_scale, batch, mtp_embedding(), *head_, saved);
  return Tensor();
}

std::pair<double, int64_t> Model::take_mtp_loss() { return mtp_ ? mtp_->take_loss() : std::pair<double, int64_t>{0, 0}; }

void Model::layer_weights(size_t l, Activations& saved, const GradsReady& ready) {
  layers_[l]->backward_weight(saved);
  report(ready, layer_begin_[l], layer_end(l));
}

Tensor Model::backward_chunk(int chunk, const Tensor& dout, Activations& saved, bool weights, const GradsReady& ready) {
  MemoryPhaseScope phase("backward");
  Tensor dx = dout;
  if (chunk_is_last_stage(chunk)) {
    MemoryPhaseScope head_phase("backward: output head and final norm");
    const Tensor dy = head_->backward_input(saved);
    if (weights) head_->backward_weight(saved);
    dx = final_norm_->backward(dy, Tensor(), saved);
    if (mtp_) {  // the modules' weight gradients come with their input gradients, here
      const Tensor dh = mtp_->backward(mtp_embedding(), *head_, saved);
      kernels::add(dx, dh, dx);
    }
    // Final only now: the MTP modules add to the shared head's gradient too, and a reported range
    // may be reduced at once (GradReducer). Descending and adjacent: the modules, the head (empty
    // when tied on a whole model: the embedding's gradient is final only at its end), the final norm.
    if (weights) {
      if (mtp_) report(ready, mtp_begin_, mtp_end_);
      report(ready, head_begin_, head_end_);
      report(ready, layers_end_, head_begin_);
    }
  }
  const size_t first = chunk_first_[size_t(chunk)];
  for (size_t i = first + size_t(plan_.chunks[size_t(chunk)].size()); i-- > first;) {
    MemoryLayerScope at{static_cast<int>(i)};
    need(layer_begin_[i], layer_end(i));
    if (cfg_.recompute) {
      const Tensor input = saved.get(recompute_key(i));
      const float grad_scale = saved.take_scalar(recompute_key(i) + ".grad_scale");
      saved.erase(recompute_key(i));
      layers_[i]->forward(input, batch_of(input.size(0)), saved, grad_scale, true);
    }
    dx = layers_[i]->backward_input(dx, saved);
    if (weights) layer_weights(i, saved, ready);
  }
  if (!first_chunk_is_first_stage(chunk)) return dx;
  if (weights) {
    embed_->backward(dx, saved);
    report(ready, 0, layers_.empty() ? layers_end_ : layer_begin_[0]);
  } else {
    saved.put(kEmbeddingGrad, dx);
  }
  return Tensor();
}

void Model::backward_weight_chunk(int chunk, Activations& saved, const GradsReady& ready) {
  MemoryPhaseScope phase("backward (weights)");
  if (chunk_is_last_stage(chunk)) {
    head_->backward_weight(saved);
    report(ready, head_begin_, head_end_);
    report(ready, layers_end_, head_begin_);  // the final norm (its gradient came with B)
    report(ready, mtp_begin_, mtp_end_);      // multi-token prediction (computed with B)
  }
  const size_t first = chunk_first_[size_t(chunk)];
  for (size_t i = first + size_t(plan_.chunks[size_t(chunk)].size()); i-- > first;) {
    MemoryLayerScope at{static_cast<int>(i)};
    layer_weights(i, saved, ready);
  }
  if (!first_chunk_is_first_stage(chunk)) return;
  embed_->backward(saved.get(kEmbeddingGrad), saved);
  saved.erase(kEmbeddingGrad);
  report(ready, 0, layers_.empty() ? layers_end_ : layer_begin_[0]);
}

double Model::forward(const Tensor& tokens, const Tensor& targets, float grad_scale, Activations& saved) {
  require_whole("Model::forward");
  double loss = 0;
  forward_chunk(0, Tensor(), tokens, targets, grad_scale, saved, &loss);
  return loss;
}

void Model::backward(Activations& saved, const GradsReady& ready) {
  require_whole("Model::backward");
  backward_chunk(0, Tensor(), saved, true, ready);
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
  require_whole("generation");
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
