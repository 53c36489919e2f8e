#pragma once
// Token embedding (+ learned absolute positions for GPT-2). Output is the fp32 residual stream.
#include <string>

#include "tessel/core/deep_const.h"
#include "tessel/comm/communicator.h"
#include "tessel/nn/activations.h"
#include "tessel/nn/model_config.h"
#include "tessel/nn/params.h"

namespace tessel::nn {

class Embedding {
 public:
  // tp (optional): vocabulary-parallel, each rank holds rows [r V/n, (r+1) V/n) (positions replicated).
  // With cfg.sequence_parallel the output (and dout) is this rank's rows of the micro-batch.
  // cp (optional): tokens are this rank's context-parallel chunks ([B, T/cp]); positions are global.
  Embedding(ParamStore& ps, const ModelConfig& cfg, comm::Communicator* tp = nullptr, comm::Communicator* cp = nullptr);
  // tokens [B, T] i64 -> [B*T, d] f32. tag: distinguishes several uses in one micro-batch (MTP).
  Tensor forward(const Tensor& tokens, Activations& saved, const std::string& tag = "") const;
  void backward(const Tensor& dout, Activations& saved, const std::string& tag = "");  // dW (and dpos)
  // Inference: tokens [n] i64 at positions pos0 .. pos0 + n - 1 of one sequence -> [n, d] f32.
  Tensor forward_at(const Tensor& tokens, int64_t pos0) const;
  int64_t weight_offset() const { return w_offset_; }
  int64_t vocab_begin() const { return vocab_begin_; }  // first row this rank holds
  int64_t local_vocab() const { return V_local_; }

 private:
  DeepConstPtr<ParamStore> ps_;  // const methods see a const store (core/deep_const.h)
  int64_t V_, D_, T_;
  comm::Communicator* cp_ = nullptr;  // set under context parallelism
  int64_t T_local_;                   // rows of a sequence on this rank
  int64_t first_row(int64_t rows) const;
  int64_t position(int64_t row) const;  // position in its sequence of row `row` of a micro-batch
  Tensor position_index(int64_t rows) const;  // i64 [rows]: each output row's position (learned positions)
  void add_positions(Tensor& out) const;
  void add_position_grads(const Tensor& dout);
  // This rank's rows of the weight as the lookup reads them: f32, or the compute copy.
  Tensor table() const {
    return lookup_in_compute_ ? ps_->compute_at(w_offset_, {V_local_, D_}) : ps_->f32_at(w_offset_, {V_local_, D_});
  }
  Tensor positions() const { return pos_offset_ >= 0 ? ps_->f32_at(pos_offset_, {T_, D_}) : Tensor(); }
  comm::Communicator* tp_ = nullptr;  // set when the vocabulary is split
  bool sequence_parallel_ = false;
  bool lookup_in_compute_ = false;  // precision.fp32_embedding off in a bf16 run
  int64_t vocab_begin_ = 0, V_local_;
  int64_t w_offset_, pos_offset_ = -1;
  std::string key_tokens_ = "model.embed_tokens.tokens";
};

}  // namespace tessel::nn
