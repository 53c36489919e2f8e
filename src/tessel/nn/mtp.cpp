#include "tessel/nn/mtp.h"

#include <string>

#include "tessel/kernels/cast.h"
#include "tessel/kernels/embedding.h"
#include "tessel/nn/context_parallel.h"

namespace tessel::nn {

namespace {
std::string tag(size_t k) { return ".mtp" + std::to_string(k + 1); }

// Module k (from 1) at position i embeds token i + k = targets[i + k - 1] and predicts token
// i + k + 1 = targets[i + k]; positions past the window embed token 0 and predict nothing (-1).
Tensor shifted(const Tensor& targets, int64_t by, int64_t fill) {
  Tensor out = Tensor::empty(targets.shape(), DType::i64, targets.device());
  kernels::shift_tokens(targets, by, fill, out);
  return out;
}
}  // namespace

MultiTokenPrediction::MultiTokenPrediction(ParamStore& ps, const ModelConfig& cfg,
                                           std::shared_ptr<const kernels::RopeTable> rope, comm::Communicator* tp,
                                           comm::Communicator* cp, comm::Communicator* ep)
    : d_(cfg.hidden_size),
      loss_scale_(cfg.mtp_loss_scaling_factor / double(cfg.mtp_num_layers)),
      cp_(cp && cp->size() > 1 ? cp : nullptr) {
  const Norm::Kind rms = Norm::Kind::rms;
  const float eps = float(cfg.norm_epsilon);
  for (int64_t k = 0; k < cfg.mtp_num_layers; ++k) {
    const int64_t index = cfg.num_layers + k;
    const std::string p = "model.layers." + std::to_string(index);
    Module m;
    m.enorm = std::make_unique<Norm>(ps, p + ".enorm", d_, rms, eps);
    m.hnorm = std::make_unique<Norm>(ps, p + ".hnorm", d_, rms, eps);
    m.eh_proj = std::make_unique<Linear>(ps, std::vector<Linear::Part>{{p + ".eh_proj", d_}}, 2 * d_, false,
                                         float(cfg.init_method_std));
    m.layer = std::make_unique<TransformerLayer>(ps, cfg, index, rope, tp, cp, ep);
    m.head_norm = std::make_unique<Norm>(ps, p + ".shared_head.norm", d_, rms, eps);
    modules_.push_back(std::move(m));
  }
}

void MultiTokenPrediction::forward(Tensor h, const Tensor& targets, float grad_scale, int64_t batch,
                                   const Embedding& embedding, const LmHead& head, Activations& saved) {
  const float scale = grad_scale * float(loss_scale_);
  // Module k needs tokens k + 1 and k + 2 ahead of every position: under context parallelism they
  // may sit on other ranks, so the shifts are taken on the whole sequences, then this rank's rows.
  const Tensor whole = cp_ ? cp_gather_sequences(targets, *cp_) : targets;
  auto mine = [&](const Tensor& t) { return cp_ ? cp_local_slice(t, cp_->rank(), cp_->size()) : t; };
  for (size_t k = 0; k < modules_.size(); ++k) {
    Module& m = modules_[k];
    const Tensor emb = embedding.forward(mine(shifted(whole, int64_t(k), 0)), saved, tag(k));
    Tensor re, rh;
    const Tensor en = m.enorm->forward(emb, Tensor(), re, saved), hn = m.hnorm->forward(h, Tensor(), rh, saved);
    Tensor cat = Tensor::empty({en.size(0), 2 * d_}, en.dtype());
    cat.slice(1, 0, d_).copy_from(en);
    cat.slice(1, d_, 2 * d_).copy_from(hn);
    h = m.layer->forward(m.eh_proj->forward(cat, saved), batch, saved, grad_scale);
    Tensor rf;
    const Tensor predict = mine(shifted(whole, int64_t(k) + 1, -1));
    loss_sum_ += head.forward_loss(m.head_norm->forward(h, Tensor(), rf, saved), predict, scale, saved, tag(k));
    tokens_ += kernels::count_nonnegative(predict);
  }
}

Tensor MultiTokenPrediction::backward(Embedding& embedding, LmHead& head, Activations& saved) {
  Tensor dh_next;  // the gradient module k + 1 sends back into h_k
  for (size_t k = modules_.size(); k-- > 0;) {
    Module& m = modules_[k];
    const Tensor dy = head.backward_input(saved, tag(k));
    head.backward_weight(saved, tag(k));
    Tensor dh = m.head_norm->backward(dy, Tensor(), saved);
    if (dh_next.defined()) kernels::add(dh, dh_next, dh);
    const Tensor dz = m.layer->backward_input(dh, saved);
    m.layer->backward_weight(saved);
    const Tensor dcat = m.eh_proj->backward_input(dz, saved);
    m.eh_proj->backward_weight(saved);
    embedding.backward(m.enorm->backward(dcat.slice(1, 0, d_).clone(), Tensor(), saved), saved, tag(k));
    dh_next = m.hnorm->backward(dcat.slice(1, d_, 2 * d_).clone(), Tensor(), saved);
  }
  return dh_next;
}

std::pair<double, int64_t> MultiTokenPrediction::take_loss() {
  const std::pair<double, int64_t> r{loss_sum_, tokens_};
  loss_sum_ = 0;
  tokens_ = 0;
  return r;
}

}  // namespace tessel::nn
