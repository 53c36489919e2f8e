#include "tessel/nn/lm_head.h"

#include "tessel/core/profiler.h"
#include "tessel/kernels/gemm.h"
#include "tessel/kernels/xent.h"
#include "tessel/nn/sequence_parallel.h"
#include "tessel/nn/vocab_parallel.h"

namespace tessel::nn {

LmHead::LmHead(ParamStore& ps, const ModelConfig& cfg, int64_t embedding_offset, comm::Communicator* tp)
    : ps_(&ps), V_(cfg.vocab_size), D_(cfg.hidden_size) {
  const bool split = tp && tp->size() > 1;
  if (split) {
    tp_ = tp;
    V_ = cfg.vocab_size / tp->size();
    vocab_begin_ = V_ * tp->rank();
    sequence_parallel_ = cfg.sequence_parallel;
  }
  if (cfg.tie_embeddings && embedding_offset >= 0) {
    w_offset_ = embedding_offset;
    return;
  }
  // Untied: lm_head.weight. Tied on a pipeline stage without the embedding: a copy registered under
  // the embedding's name, so it is drawn with the same values.
  const std::string name = cfg.tie_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
  w_offset_ = split ? ps.add_shard(name, {cfg.vocab_size, D_}, 0, tp->rank(), tp->size(), Init::normal,
                                   float(cfg.init_method_std), true)
                    : ps.add(name, {V_, D_}, Init::normal, float(cfg.init_method_std), true);
  if (cfg.tie_embeddings) ps.mark_tied_copy(w_offset_);
}

Tensor LmHead::all_rows(const Tensor& x) const {
  const DType cd = ps_->compute_dtype();
  const Tensor xc = x.dtype() == cd ? x : x.to(cd);
  return sequence_parallel_ ? sequence_all_gather(xc, *tp_) : xc;
}

double LmHead::loss_sum(const Tensor& x, const Tensor& targets) const {
  Tensor lg = logits(x);
  if (tp_) return vocab_parallel_cross_entropy(lg, targets, vocab_begin_, 0.0f, Tensor(), *tp_);
  TESSEL_CHECK(targets.numel() == lg.size(0), "loss: targets {} do not match {} rows", targets.str(), lg.size(0));
  return kernels::cross_entropy(lg, targets.reshape({-1}), 0.0f, Tensor());
}

Tensor LmHead::logits(const Tensor& x) const { return logits_of_rows(all_rows(x)); }

Tensor LmHead::logits_of_rows(const Tensor& xc) const {
  Tensor out = Tensor::empty({xc.size(0), V_}, DType::f32);
  ProfileScope prof("gemm_fwd", 2.0 * double(xc.size(0)) * double(D_) * double(V_));
  kernels::matmul(xc, false, ps_->compute_at(w_offset_, {V_, D_}), true, out, false);
  return out;
}

double LmHead::forward_loss(const Tensor& x, const Tensor& targets, float grad_scale, Activations& saved,
                            const std::string& tag) const {
  const Tensor xc = all_rows(x);
  Tensor lg = logits_of_rows(xc);
  const int64_t N = lg.size(0);
  TESSEL_CHECK(targets.numel() == N && targets.dtype() == DType::i64, "loss: targets {} do not match {} rows",
               targets.str(), N);
  ProfileScope prof("cross_entropy");
  double loss;
  Tensor dlogits;
  const Tensor target_ids = targets.reshape({-1});
  if (tp_) {
    loss = vocab_parallel_cross_entropy(lg, target_ids, vocab_begin_, grad_scale, lg, *tp_);
    dlogits = ps_->compute_dtype() == DType::bf16 ? lg.to(DType::bf16) : lg;
  } else if (ps_->compute_dtype() == DType::bf16) {
    dlogits = Tensor::empty({N, V_}, DType::bf16);
    loss = kernels::cross_entropy(lg, target_ids, grad_scale, dlogits);
  } else {
    dlogits = lg;  // written in place over the logits
    loss = kernels::cross_entropy(lg, target_ids, grad_scale, lg);
  }
  saved.put(key_x_ + tag, xc);
  saved.put(key_dlogits_ + tag, dlogits);
  return loss;
}

Tensor LmHead::backward_input(Activations& saved, const std::string& tag) {
  const Tensor& dl = saved.get(key_dlogits_ + tag);
  Tensor dx = Tensor::empty({dl.size(0), D_}, DType::f32);
  ProfileScope prof("gemm_dgrad", 2.0 * double(dl.size(0)) * double(D_) * double(V_));
  kernels::matmul(dl, false, ps_->compute_at(w_offset_, {V_, D_}), false, dx, false);
  if (!tp_) return dx;
  if (sequence_parallel_) return sequence_reduce_scatter(dx, *tp_);  // every vocab slice adds; this rank's rows
  tp_->all_reduce(dx.device_ptr(), dx.numel(), DType::f32, comm::ReduceOp::sum);
  return dx;
}

void LmHead::backward_weight(Activations& saved, const std::string& tag) {
  const Tensor& dl = saved.get(key_dlogits_ + tag);
  const Tensor& x = saved.get(key_x_ + tag);
  {
    ProfileScope prof("gemm_wgrad", 2.0 * double(dl.size(0)) * double(D_) * double(V_));
    kernels::matmul(dl, true, x, false, ps_->grad_at(w_offset_, {V_, D_}), true);
  }
  saved.erase(key_x_ + tag);
  saved.erase(key_dlogits_ + tag);
}

}  // namespace tessel::nn
