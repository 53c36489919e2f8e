#include "tessel/nn/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tessel/core/profiler.h"
#include "tessel/kernels/attention.h"
#include "tessel/nn/context_parallel.h"

namespace tessel::nn {

namespace {
int64_t tp_size(comm::Communicator* tp) { return tp ? tp->size() : 1; }

int64_t query_heads_per_rank(const ModelConfig& cfg, comm::Communicator* tp) {
  TESSEL_CHECK(cfg.num_attention_heads % tp_size(tp) == 0,
               "tensor_model_parallel_size {} must divide model.num_attention_heads ({})", tp_size(tp),
               cfg.num_attention_heads);
  return cfg.num_attention_heads / tp_size(tp);
}

// Key/value heads split when the group divides them; with more ranks than heads each head is
// replicated over tp / G consecutive ranks (those whose query heads use it).
int64_t kv_heads_per_rank(const ModelConfig& cfg, comm::Communicator* tp) {
  const int64_t n = tp_size(tp), G = cfg.num_query_groups;
  TESSEL_CHECK(G % n == 0 || n % G == 0,
               "tensor_model_parallel_size {} must divide model.num_query_groups ({}) or be a multiple of it "
               "(key/value heads are then replicated)", n, G);
  return G % n == 0 ? G / n : 1;
}
}  // namespace

SelfAttention::SelfAttention(ParamStore& ps, const std::string& prefix, const ModelConfig& cfg, int64_t layer_count,
                             std::shared_ptr<const kernels::RopeTable> rope, comm::Communicator* tp,
                             comm::Communicator* cp)
    : ps_(&ps),
      cp_(cp && cp->size() > 1 ? cp : nullptr),
      H_(query_heads_per_rank(cfg, tp)),
      G_(kv_heads_per_rank(cfg, tp)),
      Dh_(cfg.head_dim()),
      T_(cfg.seq_length / (cp_ ? cp_->size() : 1)),
      rope_(std::move(rope)),
      qkv_(ps,
           {{prefix + ".q_proj", cfg.num_attention_heads * Dh_},
            {prefix + ".k_proj", cfg.num_query_groups * Dh_, cfg.num_query_groups},
            {prefix + ".v_proj", cfg.num_query_groups * Dh_, cfg.num_query_groups}},
           cfg.hidden_size, !cfg.is_llama(), float(cfg.init_method_std),
           {TensorParallel::Mode::column, tp, cfg.sequence_parallel}),
      // Output projection scaled by 1/sqrt(2 L) (GPT-2 / Megatron "scaled init").
      o_(ps, {{prefix + ".o_proj", cfg.hidden_size}}, cfg.num_attention_heads * Dh_, !cfg.is_llama(),
         float(cfg.init_method_std / std::sqrt(2.0 * double(layer_count))),
         {TensorParallel::Mode::row, tp, cfg.sequence_parallel}) {
  key_qkv_ = prefix + ".qkv";
  key_out_ = prefix + ".attn_out";
  key_lse_ = prefix + ".lse";
}

void SelfAttention::apply_rope(const Tensor& qk, bool inverse) const {
  if (!cp_) {
    kernels::rope(*rope_, qk, H_ + G_, inverse);  // row r: position r % T
    return;
  }
  // Context parallelism: each local sequence is two chunks of consecutive global positions.
  const int64_t L = T_ / 2, T = T_ * cp_->size();
  for (int64_t b = 0; b < qk.size(0) / T_; ++b)
    for (int64_t j = 0; j < 2; ++j)
      kernels::rope(*rope_, qk.slice(0, b * T_ + j * L, b * T_ + (j + 1) * L), H_ + G_, inverse,
                    cp_global_position(j * L, T, cp_->rank(), cp_->size()));
}

Tensor SelfAttention::forward(const LinearInput& y, int64_t batch, Activations& saved) {
  Tensor qkv = qkv_.forward(y, saved);  // all rows, also when y is this rank's sequence shard
  const int64_t N = qkv.size(0);
  TESSEL_CHECK(N == batch * T_, "attention: {} rows is not batch {} x seq_length {}", N, batch, T_);
  if (rope_) {
    ProfileScope prof("rope");
    apply_rope(qkv.slice(1, 0, (H_ + G_) * Dh_), false);  // q and k heads are adjacent
  }
  Tensor out = Tensor::empty({N, H_ * Dh_}, ps_->compute_dtype());
  Tensor lse = Tensor::empty({batch, H_, T_}, DType::f32);
  const kernels::AttentionShape s{batch, T_, H_, G_, Dh_, true, float(1.0 / std::sqrt(double(Dh_)))};
  {
    ProfileScope prof("attention_fwd", kernels::attention_forward_flops(s) * double(cp_ ? cp_->size() : 1));
    const Tensor q = qkv.slice(1, 0, H_ * Dh_), k = qkv.slice(1, H_ * Dh_, (H_ + G_) * Dh_),
                 v = qkv.slice(1, (H_ + G_) * Dh_, (H_ + 2 * G_) * Dh_);
    if (cp_)
      ring_attention_forward(s, q, k, v, out, lse, *cp_);
    else
      kernels::attention_forward(s, q, k, v, out, lse);
  }
  saved.put(key_qkv_, qkv);
  saved.put(key_out_, out);
  saved.put(key_lse_, lse);
  return o_.forward(out, saved);
}

Tensor SelfAttention::backward_input(const Tensor& dout, Activations& saved) {
  Tensor dattn = o_.backward_input(dout, saved);  // [N, H*Dh] f32
  const Tensor& qkv = saved.get(key_qkv_);
  const Tensor& out = saved.get(key_out_);
  const Tensor& lse = saved.get(key_lse_);
  const int64_t N = qkv.size(0), batch = N / T_;
  Tensor dqkv = Tensor::empty(qkv.shape(), DType::f32);
  const kernels::AttentionShape s{batch, T_, H_, G_, Dh_, true, float(1.0 / std::sqrt(double(Dh_)))};
  {
    ProfileScope prof("attention_bwd", 2.5 * kernels::attention_forward_flops(s) * double(cp_ ? cp_->size() : 1));
    const auto heads = [&](const Tensor& t, int64_t begin, int64_t end) { return t.slice(1, begin * Dh_, end * Dh_); };
    const Tensor q = heads(qkv, 0, H_), k = heads(qkv, H_, H_ + G_), v = heads(qkv, H_ + G_, H_ + 2 * G_);
    const Tensor dq = heads(dqkv, 0, H_), dk = heads(dqkv, H_, H_ + G_), dv = heads(dqkv, H_ + G_, H_ + 2 * G_);
    if (cp_)
      ring_attention_backward(s, q, k, v, out, dattn, lse, dq, dk, dv, *cp_);
    else
      kernels::attention_backward(s, q, k, v, out, dattn, lse, dq, dk, dv);
  }
  saved.erase(key_qkv_);
  saved.erase(key_out_);
  saved.erase(key_lse_);
  if (rope_) {
    ProfileScope prof("rope");
    apply_rope(dqkv.slice(1, 0, (H_ + G_) * Dh_), true);
  }
  return qkv_.backward_input(dqkv, saved);
}

Tensor SelfAttention::forward_decode(const Tensor& y, int64_t pos0, Tensor& k_cache, Tensor& v_cache) {
  TESSEL_CHECK(!cp_, "generation under context parallelism is not supported yet");
  Activations scratch;
  const int64_t n = y.size(0), kv = G_ * Dh_;
  TESSEL_CHECK(pos0 + n <= k_cache.size(0), "KV cache holds {} positions, {} needed", k_cache.size(0), pos0 + n);
  Tensor qkv = qkv_.forward(y, scratch);  // [n, (H + 2G) Dh]: q heads, then k, then v
  if (rope_) kernels::rope(*rope_, qkv.slice(1, 0, (H_ + G_) * Dh_), H_ + G_, false, pos0);
  kernels::kv_cache_append(qkv.slice(1, H_ * Dh_, H_ * Dh_ + kv), qkv.slice(1, H_ * Dh_ + kv, H_ * Dh_ + 2 * kv), pos0,
                           k_cache, v_cache);
  Tensor out = Tensor::empty({n, H_ * Dh_}, DType::f32);
  kernels::attention_decode(qkv.slice(1, 0, H_ * Dh_), k_cache, v_cache, pos0, H_, G_,
                            float(1.0 / std::sqrt(double(Dh_))), out);
  const Tensor oc = out.dtype() == ps_->compute_dtype() ? out : out.to(ps_->compute_dtype());
  return o_.forward(oc, scratch);
}

void SelfAttention::backward_weight(Activations& saved) {
  o_.backward_weight(saved);
  qkv_.backward_weight(saved);
}

}  // namespace tessel::nn
