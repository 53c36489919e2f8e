#pragma once
// Linear: y[N, out] (fp32) = x[N, in] @ W^T (+ b), W [out, in] row-major (Hugging Face layout).
// A Linear may fuse several named parts (q/k/v, gate/up): they are registered adjacently, so their
// concatenation along `out` is one weight and one GEMM.
//   forward         saves x (compute dtype)
//   backward_input  dx = dy @ W, saves dy in the compute dtype for the weight gradient
//   backward_weight dW += dy^T @ x, db += sum_rows(dy)
// With an FP8 state in the ParamStore at construction (ps.fp8()), the three GEMMs take FP8 operands
// (fp8.h): the weight quantised once per parameter version, x and dy quantised as they come, x and
// dy saved for the weight gradient in FP8; the bias gradient is taken from dy in backward_input.
#include <string>
#include <utility>
#include <vector>

#include "tessel/core/deep_const.h"
#include "tessel/comm/communicator.h"
#include "tessel/kernels/fp8_gemm.h"
#include "tessel/nn/activations.h"
#include "tessel/nn/fp8.h"
#include "tessel/nn/params.h"

namespace tessel::nn {

// Tensor parallelism (Megatron-LM, Shoeybi et al. 2019) over a group of `size` ranks:
//   column: each rank holds rows [r*out/size, (r+1)*out/size) of every part's weight (and bias);
//           forward gives this rank's output columns; backward_input all-reduces dx.
//   row:    each rank holds columns [r*in/size, ...) of the weight; forward takes this rank's input
//           columns and all-reduces y (the replicated bias is added once, after); backward_input
//           gives this rank's dx columns.
// With sequence_parallel (sequence_parallel.h) the input of a column Linear is this rank's rows and
// is all-gathered first (dx reduce-scattered back); a row Linear reduce-scatters y to this rank's rows
// (dy all-gathered first), and its replicated bias gradient covers this rank's rows only.
struct TensorParallel {
  enum class Mode { none, column, row };
  Mode mode = Mode::none;
  comm::Communicator* group = nullptr;  // size 1 or null: no parallelism
  bool sequence_parallel = false;
};

// A Linear's input: a tensor [N, in], or its FP8 form written by a fused producer (fp8_input()).
struct LinearInput {
  LinearInput(Tensor x) : x(std::move(x)) {}  // NOLINT: implicit, a tensor is the common input
  LinearInput(Fp8Input q) : q(std::move(q)) {}  // NOLINT
  bool quantized() const { return q.rows.data.defined(); }
  int64_t rows() const { return quantized() ? q.rows.rows() : x.size(0); }
  Tensor x;
  Fp8Input q;
};

class Linear {
 public:
  struct Part {
    std::string name;  // full parameter prefix, e.g. "model.layers.0.self_attn.q_proj"
    int64_t out;       // global output features of this part
    // Column-parallel only: at most this many shards (0: no limit). With more ranks, each shard is
    // replicated over size / max_shards consecutive ranks (key/value heads when tp > their number).
    int64_t max_shards = 0;
  };
  // in: global input features.
  Linear(ParamStore& ps, std::vector<Part> parts, int64_t in, bool bias, float init_std, TensorParallel tp = {});

  Tensor forward(const LinearInput& x, Activations& saved);
  // Whether the kernel producing this Linear's input may write it as FP8 (kernels/fp8_fused.h): FP8
  // on with a recipe that fuses (Fp8State::fuses_producers) and no sequence-parallel all-gather of
  // the input in front of the GEMM.
  bool takes_fp8_input() const { return fp8_ && fp8_->fuses_producers() && !(column() && sequence()); }
  // Its FP8 input for N rows, allocated, with the Fp8Out a fused producer writes it through.
  Fp8Input fp8_input(int64_t N) const { return fp8_->fused_input(slot_x_, fp8_->recipe().forward, N, in_); }
  Tensor backward_input(const Tensor& dy, Activations& saved);
  void backward_weight(Activations& saved);

  // The bytes this Linear holds across calls besides its parameters: its cached FP8 weight.
  MemoryAmount cached_bytes() const;

  int64_t in_features() const { return in_; }    // local (this rank's)
  int64_t out_features() const { return out_; }  // local (this rank's)

 private:
  bool block_scaled() const;
  const kernels::Fp8Tensor& quantized_weight();  // quantises on a new parameter version or FP8 step
  void add_bias_rows(Tensor& y) const;
  void accumulate_bias_grad(const Tensor& dy);
  bool sharded() const { return tp_.group && tp_.group->size() > 1 && tp_.mode != TensorParallel::Mode::none; }
  bool column() const { return sharded() && tp_.mode == TensorParallel::Mode::column; }
  bool row() const { return sharded() && tp_.mode == TensorParallel::Mode::row; }
  bool sequence() const { return sharded() && tp_.sequence_parallel; }
  DeepConstPtr<ParamStore> ps_;  // const methods see a const store (core/deep_const.h)
  TensorParallel tp_;
  int64_t in_, out_ = 0;
  int64_t w_offset_ = -1, b_offset_ = -1;
  std::string key_x_, key_dy_;
  DeepConstPtr<Fp8State> fp8_ = nullptr;
  int slot_x_ = -1, slot_w_ = -1, slot_dy_ = -1;
  kernels::Fp8Tensor wq_;  // the quantised weight of parameter version wq_version_
  uint64_t wq_version_ = 0, wq_step_ = 0;
  bool wq_unrecorded_ = false;  // wq_ was made during an evaluation: its amax is not in the step
};

}  // namespace tessel::nn
