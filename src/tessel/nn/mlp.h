#pragma once
// Feed-forward block. Llama: down(silu(gate(y)) * up(y)) with gate/up fused into one [2F, d] weight.
// GPT-2: down(gelu_tanh(up(y) + b) ) + b.
#include <string>

#include "tessel/core/deep_const.h"
#include "tessel/nn/layer_blocks.h"
#include "tessel/nn/linear.h"
#include "tessel/nn/model_config.h"

namespace tessel::nn {

class Mlp final : public MlpBlock {
 public:
  // tp (optional): up/gate column-parallel, down row-parallel; ffn_hidden_size must divide.
  // ffn: the hidden size (0: cfg.ffn_hidden_size; MoE experts pass theirs).
  Mlp(ParamStore& ps, const std::string& prefix, const ModelConfig& cfg, int64_t layer_count,
      comm::Communicator* tp = nullptr, int64_t ffn = 0);
  Tensor forward(const LinearInput& y, Activations& saved);  // [N, d] -> [N, d] f32
  Tensor forward(const LinearInput& y, float, Activations& saved, bool) override { return forward(y, saved); }
  const Linear* input_linear() const override { return &up_; }  // the Linear reading y
  Tensor backward_input(const Tensor& dout, Activations& saved) override;
  void backward_weight(Activations& saved) override;
  // What its Linears hold across calls (their cached FP8 weights).
  MemoryAmount cached_bytes() const;

 private:
  // The activation of the up projection's output h: down_proj's input, FP8 when it takes that.
  LinearInput activate(const Tensor& h) const;
  DeepConstPtr<ParamStore> ps_;  // const methods see a const store (core/deep_const.h)
  bool swiglu_;
  int64_t F_;  // this rank's share of ffn_hidden_size
  Linear up_, down_;
  std::string key_h_;
};

}  // namespace tessel::nn
