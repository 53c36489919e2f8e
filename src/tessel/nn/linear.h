#pragma once
// Linear: y[N, out] (fp32) = x[N, in] @ W^T (+ b), W [out, in] row-major (Hugging Face layout).
// A Linear may fuse several named parts (q/k/v, gate/up): they are registered adjacently, so their
// concatenation along `out` is one weight and one GEMM.
//   forward         saves x (compute dtype)
//   backward_input  dx = dy @ W, saves dy in the compute dtype for the weight gradient
//   backward_weight dW += dy^T @ x, db += sum_rows(dy)
#include <string>
#include <vector>

#include "tessel/nn/activations.h"
#include "tessel/nn/params.h"

namespace tessel::nn {

class Linear {
 public:
  struct Part {
    std::string name;  // full parameter prefix, e.g. "model.layers.0.self_attn.q_proj"
    int64_t out;
  };
  Linear(ParamStore& ps, std::vector<Part> parts, int64_t in, bool bias, float init_std);

  Tensor forward(const Tensor& x, Activations& saved) const;
  Tensor backward_input(const Tensor& dy, Activations& saved) const;
  void backward_weight(Activations& saved) const;

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

 private:
  ParamStore& ps_;
  int64_t in_, out_ = 0;
  int64_t w_offset_ = -1, b_offset_ = -1;
  std::string key_x_, key_dy_;
};

}  // namespace tessel::nn
