#pragma once
// Norm: RMSNorm (Llama) or LayerNorm (GPT-2) with the residual add fused in front.
//   forward(r_in, delta): r_out = r_in + delta (delta may be undefined), y = norm(r_out) in compute dtype.
//   backward(dy, dresid): returns dresid + d norm(r_out)/d r_out ^T dy, accumulates dw (and db).
// The gradient of r_out flows both into the norm and along the residual, hence dresid.
#include <string>

#include "tessel/core/deep_const.h"
#include "tessel/nn/activations.h"
#include "tessel/nn/linear.h"
#include "tessel/nn/params.h"

namespace tessel::nn {

class Norm {
 public:
  enum class Kind { rms, layer };
  Norm(ParamStore& ps, const std::string& prefix, int64_t D, Kind kind, float eps);

  Tensor forward(const Tensor& r_in, const Tensor& delta, Tensor& r_out, Activations& saved) const;
  // forward() producing the input of `consumer`: written as FP8 by the fused kernel when the
  // Linear takes it (Linear::takes_fp8_input), else the compute-dtype y.
  LinearInput forward_for(const Linear& consumer, const Tensor& r_in, const Tensor& delta, Tensor& r_out,
                          Activations& saved) const;
  Tensor backward(const Tensor& dy, const Tensor& dresid, Activations& saved);

 private:
  // Runs the norm with r_out, rstd (and mean) set up and saved; write(r_in, delta, r_out, w, b, mean,
  // rstd) calls the kernel (b, mean: LayerNorm only).
  template <class Write>
  void run(const Tensor& r_in, const Tensor& delta, Tensor& r_out, Activations& saved, Write&& write) const;
  DeepConstPtr<ParamStore> ps_;  // const methods see a const store (core/deep_const.h)
  int64_t D_;
  Kind kind_;
  float eps_;
  int64_t w_offset_, b_offset_ = -1;
  std::string key_x_, key_rstd_, key_mean_;
};

}  // namespace tessel::nn
