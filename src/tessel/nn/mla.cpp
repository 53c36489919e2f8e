#include "tessel/nn/mla.h"

#include <cmath>
#include <cstring>

#include "tessel/core/profiler.h"
#include "tessel/kernels/attention.h"
#include "tessel/kernels/cast.h"
#include "tessel/kernels/heads.h"
#include "tessel/kernels/rope.h"
#include "tessel/nn/context_parallel.h"
#include "tessel/nn/sequence_parallel.h"

namespace tessel::nn {

namespace {
int64_t tp_size(comm::Communicator* tp) { return tp && tp->size() > 1 ? tp->size() : 1; }

// Columns [c0, c0 + w) of an f32 [N, C] tensor, contiguous.
Tensor columns(const Tensor& x, int64_t c0, int64_t w) { return x.slice(1, c0, c0 + w).clone(); }
}  // namespace

MlaAttention::MlaAttention(ParamStore& ps, const std::string& prefix, const ModelConfig& cfg, int64_t layer_count,
                           std::shared_ptr<const kernels::RopeTable> rope, comm::Communicator* tp,
                           comm::Communicator* cp)
    : ps_(&ps),
      tp_(tp && tp->size() > 1 ? tp : nullptr),
      cp_(cp && cp->size() > 1 ? cp : nullptr),
      sp_(tp_ && cfg.sequence_parallel),
      H_(cfg.num_attention_heads / tp_size(tp)),
      nope_(cfg.qk_head_dim),
      rope_dim_(cfg.qk_pos_emb_head_dim),
      v_(cfg.v_head_dim),
      kv_lora_(cfg.kv_lora_rank),
      T_(cfg.seq_length / (cp_ ? cp_->size() : 1)),
      rope_(std::move(rope)),
      kv_a_(ps, {{prefix + ".kv_a_proj_with_mqa", cfg.kv_lora_rank + cfg.qk_pos_emb_head_dim}}, cfg.hidden_size, false,
            float(cfg.init_method_std)),
      kv_norm_(ps, prefix + ".kv_a_layernorm", cfg.kv_lora_rank, Norm::Kind::rms, float(cfg.norm_epsilon)),
      kv_b_(ps, {{prefix + ".kv_b_proj", cfg.num_attention_heads * (cfg.qk_head_dim + cfg.v_head_dim)}},
            cfg.kv_lora_rank, false, float(cfg.init_method_std),
            {TensorParallel::Mode::column, tp, cfg.sequence_parallel}),
      o_(ps, {{prefix + ".o_proj", cfg.hidden_size}}, cfg.num_attention_heads * cfg.v_head_dim, false,
         float(cfg.init_method_std / std::sqrt(2.0 * double(layer_count))),
         {TensorParallel::Mode::row, tp, cfg.sequence_parallel}) {
  TESSEL_CHECK(cfg.num_attention_heads % tp_size(tp) == 0,
               "tensor_model_parallel_size {} must divide model.num_attention_heads ({})", tp_size(tp),
               cfg.num_attention_heads);
  const int64_t q_out = cfg.num_attention_heads * (cfg.qk_head_dim + cfg.qk_pos_emb_head_dim);
  if (cfg.q_lora_rank > 0) {
    q_a_ = std::make_unique<Linear>(ps, std::vector<Linear::Part>{{prefix + ".q_a_proj", cfg.q_lora_rank}},
                                    cfg.hidden_size, false, float(cfg.init_method_std));
    q_norm_ = std::make_unique<Norm>(ps, prefix + ".q_a_layernorm", cfg.q_lora_rank, Norm::Kind::rms,
                                     float(cfg.norm_epsilon));
    q_b_ = std::make_unique<Linear>(ps, std::vector<Linear::Part>{{prefix + ".q_b_proj", q_out}}, cfg.q_lora_rank,
                                    false, float(cfg.init_method_std),
                                    TensorParallel{TensorParallel::Mode::column, tp, cfg.sequence_parallel});
  } else {
    q_ = std::make_unique<Linear>(ps, std::vector<Linear::Part>{{prefix + ".q_proj", q_out}}, cfg.hidden_size, false,
                                  float(cfg.init_method_std),
                                  TensorParallel{TensorParallel::Mode::column, tp, cfg.sequence_parallel});
  }
  key_q_ = prefix + ".mla_q";
  key_k_ = prefix + ".mla_k";
  key_v_ = prefix + ".mla_v";
  key_out_ = prefix + ".mla_out";
  key_lse_ = prefix + ".mla_lse";
}

void MlaAttention::apply_rope(const Tensor& x, bool inverse, int64_t heads, int64_t head_stride) const {
  if (!cp_) {
    kernels::rope(*rope_, x, heads, inverse, -1, head_stride);  // row r: position r % T
    return;
  }
  // Context parallelism: each local sequence is two chunks of consecutive global positions.
  const int64_t L = T_ / 2, T = T_ * cp_->size();
  for (int64_t b = 0; b < x.size(0) / T_; ++b)
    for (int64_t j = 0; j < 2; ++j)
      kernels::rope(*rope_, x.slice(0, b * T_ + j * L, b * T_ + (j + 1) * L), heads, inverse,
                    cp_global_position(j * L, T, cp_->rank(), cp_->size()), head_stride);
}

void MlaAttention::apply_rope_to_heads(const Tensor& x, bool inverse) const {
  // The rotary columns [nope, nope + rope) of every head of x [N, H * (nope + rope)], in one call:
  // columns [nope, H * D) hold H rotary blocks D apart.
  const int64_t D = qk();
  apply_rope(x.slice(1, nope_, H_ * D), inverse, H_, D);
}

kernels::AttentionShape MlaAttention::attention_shape(int64_t batch) const {
  // Queries and keys of nope + rope columns, values of v: softmax scale 1 / sqrt(nope + rope).
  const int64_t D = qk();
  return {batch, T_, H_, H_, D, true, float(1.0 / std::sqrt(double(D))), v_};
}

Tensor MlaAttention::forward(const LinearInput& y, int64_t batch, Activations& saved) {
  TESSEL_CHECK(!y.quantized(), "multi-latent attention takes its input unquantized (two Linears read it)");
  return forward(y.x, batch, saved);
}

Tensor MlaAttention::forward_decode(const Tensor&, int64_t, Tensor&, Tensor&) {
  TESSEL_FAIL("generation with multi-latent attention is not supported yet");
}

int64_t MlaAttention::kv_width() const { TESSEL_FAIL("generation with multi-latent attention is not supported yet"); }

Tensor MlaAttention::forward(const Tensor& y, int64_t batch, Activations& saved) {
  // The replicated latent projections and norms run on y's rows (this rank's under sequence
  // parallelism); q_b / q and kv_b give all rows of the local sequences.
  // Queries [N, H, nope + rope], the buffer the kernel reads.
  Tensor q;
  if (q_a_) {
    Tensor r;
    q = q_b_->forward(q_norm_->forward(q_a_->forward(y, saved), Tensor(), r, saved), saved);
  } else {
    q = q_->forward(y, saved);
  }
  const int64_t N = q.size(0), D = qk(), ld = H_ * D;
  TESSEL_CHECK(N == batch * T_, "MLA: {} rows is not batch {} x {} rows per sequence", N, batch, T_);
  const Tensor kva = kv_a_.forward(y, saved);  // [y rows, kv_lora + rope]
  Tensor r2;
  const Tensor kv = kv_b_.forward(kv_norm_.forward(columns(kva, 0, kv_lora_), Tensor(), r2, saved), saved);
  Tensor kpe = columns(kva, kv_lora_, rope_dim_);
  if (sp_) kpe = sequence_all_gather(kpe, *tp_);  // [N, rope], small
  Tensor k = Tensor::empty({N, ld}, DType::f32), v = Tensor::empty({N, H_ * v_}, DType::f32);
  {
    ProfileScope prof("rope");
    apply_rope(kpe, false);
    apply_rope_to_heads(q, false);
  }
  // Keys: each head's nope columns from kv_b, then the shared rotary key; values: each head's v
  // columns from kv_b (heads of v columns: the kernel takes value heads narrower than the keys).
  const int64_t kv_head = nope_ + v_;
  kernels::copy_head_columns(kv, kv_head, 0, k, D, 0, nope_, H_);
  kernels::copy_head_columns(kpe, 0, 0, k, D, nope_, rope_dim_, H_);
  kernels::copy_head_columns(kv, kv_head, nope_, v, v_, 0, v_, H_);
  Tensor out = Tensor::empty({N, H_ * v_}, ps_->compute_dtype());
  Tensor lse = Tensor::empty({batch, H_, T_}, DType::f32);
  const kernels::AttentionShape s = attention_shape(batch);
  {
    ProfileScope prof("attention_fwd", kernels::attention_forward_flops(s) * double(cp_ ? cp_->size() : 1));
    if (cp_)
      ring_attention_forward(s, q, k, v, out, lse, *cp_);
    else
      kernels::attention_forward(s, q, k, v, out, lse);
  }
  saved.put(key_q_, q);
  saved.put(key_k_, k);
  saved.put(key_v_, v);
  saved.put(key_out_, out);
  saved.put(key_lse_, lse);
  return o_.forward(out, saved);  // [N, H * v]: every head's output goes to the output projection
}

Tensor MlaAttention::backward_input(const Tensor& dout, Activations& saved) {
  const Tensor dov = o_.backward_input(dout, saved);  // [N, H * v] f32
  const Tensor q = saved.get(key_q_), k = saved.get(key_k_), v = saved.get(key_v_);
  const Tensor out = saved.get(key_out_), lse = saved.get(key_lse_);
  for (const auto& key : {key_q_, key_k_, key_v_, key_out_, key_lse_}) saved.erase(key);
  const int64_t N = q.size(0), D = qk(), ld = H_ * D, batch = N / T_;
  Tensor dq = Tensor::empty({N, ld}, DType::f32), dk = Tensor::empty({N, ld}, DType::f32);
  Tensor dv = Tensor::empty({N, H_ * v_}, DType::f32);
  const kernels::AttentionShape s = attention_shape(batch);
  {
    ProfileScope prof("attention_bwd", 2.5 * kernels::attention_forward_flops(s) * double(cp_ ? cp_->size() : 1));
    if (cp_)
      ring_attention_backward(s, q, k, v, out, dov, lse, dq, dk, dv, *cp_);
    else
      kernels::attention_backward(s, q, k, v, out, dov, lse, dq, dk, dv);
  }
  // Keys: per-head nope parts and values back into kv_b's layout; the shared rope key sums its heads.
  const int64_t kv_head = nope_ + v_;
  Tensor dkv = Tensor::empty({N, H_ * kv_head}, DType::f32), dkpe = Tensor::zeros({N, rope_dim_}, DType::f32);
  kernels::copy_head_columns(dk, D, 0, dkv, kv_head, 0, nope_, H_);
  kernels::copy_head_columns(dv, v_, 0, dkv, kv_head, nope_, v_, H_);
  kernels::sum_head_columns(dk, D, nope_, dkpe, rope_dim_, H_);
  {
    ProfileScope prof("rope");
    apply_rope(dkpe, true);
    apply_rope_to_heads(dq, true);
  }
  // The shared key's gradient sums every rank's heads (under sequence parallelism: this rank's rows of it).
  if (sp_)
    dkpe = sequence_reduce_scatter(dkpe, *tp_);
  else if (tp_)
    tp_->all_reduce(dkpe.device_ptr(), dkpe.numel(), DType::f32, comm::ReduceOp::sum);
  // [rows, kv_lora]: this rank's rows under sequence parallelism (kv_b reduce-scatters).
  const Tensor dckv = kv_norm_.backward(kv_b_.backward_input(dkv, saved), Tensor(), saved);
  Tensor dkva = Tensor::empty({dckv.size(0), kv_lora_ + rope_dim_}, DType::f32);
  dkva.slice(1, 0, kv_lora_).copy_from(dckv);
  dkva.slice(1, kv_lora_, kv_lora_ + rope_dim_).copy_from(dkpe);
  Tensor dy = kv_a_.backward_input(dkva, saved);
  const Tensor dyq = q_a_ ? q_a_->backward_input(q_norm_->backward(q_b_->backward_input(dq, saved), Tensor(), saved), saved)
                          : q_->backward_input(dq, saved);
  kernels::add(dy, dyq, dy);
  return dy;
}

void MlaAttention::backward_weight(Activations& saved) {
  o_.backward_weight(saved);
  kv_b_.backward_weight(saved);
  kv_a_.backward_weight(saved);
  if (q_a_) {
    q_b_->backward_weight(saved);
    q_a_->backward_weight(saved);
  } else {
    q_->backward_weight(saved);
  }
}

}  // namespace tessel::nn
