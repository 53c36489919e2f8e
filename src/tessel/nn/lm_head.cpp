#include "tessel/nn/lm_head.h"

#include "tessel/core/profiler.h"
#include "tessel/kernels/gemm.h"
#include "tessel/kernels/xent.h"

namespace tessel::nn {

LmHead::LmHead(ParamStore& ps, const ModelConfig& cfg, int64_t embedding_offset)
    : ps_(ps), V_(cfg.vocab_size), D_(cfg.hidden_size) {
  w_offset_ = cfg.tie_embeddings
                  ? embedding_offset
                  : ps.add("lm_head.weight", {V_, D_}, Init::normal, float(cfg.init_method_std), true);
}

Tensor LmHead::logits(const Tensor& x) const {
  const DType cd = ps_.compute_dtype();
  const Tensor xc = x.dtype() == cd ? x : x.to(cd);
  Tensor out = Tensor::empty({x.size(0), V_}, DType::f32);
  ProfileScope prof("gemm_fwd", 2.0 * double(x.size(0)) * double(D_) * double(V_));
  kernels::matmul(xc, false, ps_.compute_at(w_offset_, {V_, D_}), true, out, false);
  return out;
}

double LmHead::forward_loss(const Tensor& x, const Tensor& targets, float grad_scale, Activations& saved) const {
  Tensor lg = logits(x);
  const int64_t N = lg.size(0);
  TESSEL_CHECK(targets.numel() == N && targets.dtype() == DType::i64, "loss: targets {} do not match {} rows",
               targets.str(), N);
  ProfileScope prof("cross_entropy");
  double loss;
  Tensor dlogits;
  if (ps_.compute_dtype() == DType::bf16) {
    dlogits = Tensor::empty({N, V_}, DType::bf16);
    loss = kernels::softmax_xent(N, V_, lg.data<float>(), targets.data<int64_t>(), grad_scale, dlogits.data<bf16>());
  } else {
    dlogits = lg;  // written in place over the logits
    loss = kernels::softmax_xent(N, V_, lg.data<float>(), targets.data<int64_t>(), grad_scale, lg.data<float>());
  }
  saved.put(key_x_, x.dtype() == ps_.compute_dtype() ? x : x.to(ps_.compute_dtype()));
  saved.put(key_dlogits_, dlogits);
  return loss;
}

Tensor LmHead::backward_input(Activations& saved) const {
  const Tensor& dl = saved.get(key_dlogits_);
  Tensor dx = Tensor::empty({dl.size(0), D_}, DType::f32);
  ProfileScope prof("gemm_dgrad", 2.0 * double(dl.size(0)) * double(D_) * double(V_));
  kernels::matmul(dl, false, ps_.compute_at(w_offset_, {V_, D_}), false, dx, false);
  return dx;
}

void LmHead::backward_weight(Activations& saved) const {
  const Tensor& dl = saved.get(key_dlogits_);
  const Tensor& x = saved.get(key_x_);
  {
    ProfileScope prof("gemm_wgrad", 2.0 * double(dl.size(0)) * double(D_) * double(V_));
    kernels::matmul(dl, true, x, false, ps_.grad_at(w_offset_, {V_, D_}), true);
  }
  saved.erase(key_x_);
  saved.erase(key_dlogits_);
}

}  // namespace tessel::nn
