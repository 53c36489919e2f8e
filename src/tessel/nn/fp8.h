#pragma once
// Fp8State: the quantisation state of a model's FP8 Linears under one recipe (fp8_recipe.h).
// Each Linear registers three tensors: its input x, its weight w and its output gradient dy.
//   delayed  per-tensor scales from an amax history (TransformerEngine DelayedScaling): a step uses
//            the scales computed at the end of the previous one; every quantisation records its
//            amax; end_step() reduces the step's amaxes (max) across the given groups (tensor and
//            data parallel), pushes them into the histories and computes the next scales.
//   current  per-tensor scales from the tensor's own amax (one extra pass; Float8CurrentScaling).
//   block    power-of-two scales per 1 x 128 tile of activations and gradients along the GEMM's
//            contraction dimension and per 128 x 128 block of weights (DeepSeek-V3).
#include <string>
#include <utility>
#include <vector>

#include "tessel/comm/communicator.h"
#include "tessel/kernels/fp8_fused.h"
#include "tessel/kernels/fp8_gemm.h"
#include "tessel/nn/fp8_recipe.h"

namespace tessel::nn {

// A Linear's input quantised by the kernel that produced it (a fused norm or activation).
struct Fp8Input {
  kernels::Fp8Tensor rows;    // [N, D] for the forward GEMM (per tensor or 1 x 128 row tiles)
  kernels::Fp8Tensor cols_t;  // block scaling: [D, N] column tiles, the weight-gradient operand
  Tensor amax;                // per tensor: [1], the producer's output amax
  int slot = -1;              // the consuming Linear's input slot
  kernels::Fp8Out out;        // where the producer writes: pointers into the tensors above
};

class Fp8State {
 public:
  explicit Fp8State(const Fp8Recipe& recipe);
  const Fp8Recipe& recipe() const { return r_; }
  // A quantised tensor's slot (name: "<linear>.x" / ".w" / ".dy"), quantised to fmt. tp_amax: current
  // scaling reduces its amax over the amax group (off for Linears a rank may skip while the others
  // run them: routed experts replicated over tensor parallelism, each rank with its own rows).
  int add(const std::string& name, DType fmt, bool tp_amax = true);
  // Current scaling under tensor parallelism: each tensor's amax is reduced (max) over this group
  // before its scale is taken, so a sharded tensor gets the scale the whole tensor would.
  void set_amax_group(comm::Communicator* g) { amax_group_ = g && g->size() > 1 ? g : nullptr; }

  // x [R, C] (f32 or bf16) for a GEMM contracting along C (row tiles under block scaling).
  kernels::Fp8Tensor quantize_rows(const Tensor& x, int slot, DType fmt);
  // Block scaling only: x for a GEMM contracting along R (the wgrad operand), 128 x 1 column tiles
  // written transposed [C, R] (cast-transpose). Per-tensor recipes reuse quantize_rows' result.
  kernels::Fp8Tensor quantize_cols_transposed(const Tensor& x, int slot, DType fmt);
  // Fused producers (kernels/fp8_fused.h) quantise while they compute: possible when the scale is
  // known before the tensor is (delayed: the slot's scale; block: per tile), not under current
  // scaling (its scale needs the finished tensor's amax), and only with recipe().fused_casts.
  bool fuses_producers() const;
  // Slot's input [N, D] allocated in fmt with the Fp8Out a fused kernel writes it through; block
  // scaling also allocates the column tiles.
  Fp8Input fused_input(int slot, DType fmt, int64_t N, int64_t D) const;
  // Delayed scaling: a fused producer's amax for slot, folded into the step's amax (not while an
  // Evaluation lives).
  void record_amax(int slot, float amax);

  // A weight [out, in] f32: one per-tensor scale or 128 x 128 blocks.
  kernels::Fp8Tensor quantize_weight(const Tensor& w, int slot);

  // Delayed scaling: the step's amaxes reduced over `groups` (max), histories and scales updated;
  // routed experts' tensors over `expert_groups` instead when given (expert parallelism: the ranks
  // holding the same experts). Collective over every group; a no-op for the other recipes.
  void end_step(const std::vector<comm::Communicator*>& groups,
                const std::vector<comm::Communicator*>& expert_groups = {});
  float scale(int slot) const { return scale_[size_t(slot)]; }
  uint64_t steps() const { return steps_; }  // end_step calls so far (cached quantisations compare it)
  bool evaluating() const { return evaluating_; }  // an Evaluation lives
  const std::vector<float>& history(int slot) const { return history_[size_t(slot)]; }

  // While one lives, quantisations use the step's scales but record no amax into the step: an
  // evaluation forward (Model::loss_sum, a pipeline's forward-only pass) leaves the histories, and so
  // every later scale, as they would be without it. That includes weights: a routed expert the
  // evaluation reaches may get no tokens in the step's training, which then records nothing for it.
  // A Linear that reuses a weight quantised during an evaluation quantises it again at its first
  // training use, recording its amax then (Linear::quantized_weight).
  class Evaluation {
   public:
    explicit Evaluation(Fp8State* state);  // null: no FP8 (nothing to do)
    ~Evaluation();
    Evaluation(const Evaluation&) = delete;
    Evaluation& operator=(const Evaluation&) = delete;

   private:
    Fp8State* state_;
    bool was_evaluating_;
  };

  // Checkpoint form: "fp8.<name>.amax_history" [history_len] and "fp8.<name>.scale" [1] per slot.
  std::vector<std::pair<std::string, Tensor>> state_tensors() const;
  // Restores a slot from tensors of the same names; false when a tensor is missing.
  bool load_state(const std::vector<std::pair<std::string, Tensor>>& tensors);

 private:
  void fold_amax(int slot, float amax);  // max into the step's amax (NaN sticks)
  // record: fold x's amax into the step's (delayed scaling).
  kernels::Fp8Tensor per_tensor(const Tensor& x, int slot, DType fmt, bool record);
  Fp8Recipe r_;
  std::vector<std::string> names_;
  std::vector<DType> formats_;
  std::vector<bool> expert_;  // a routed expert's slot (is_routed_expert_name)
  std::vector<bool> tp_amax_;
  std::vector<std::vector<float>> history_;  // [0] = the most recent completed step
  std::vector<float> scale_, step_amax_;
  uint64_t steps_ = 0;
  comm::Communicator* amax_group_ = nullptr;
  bool evaluating_ = false;  // an Evaluation lives
};

}  // namespace tessel::nn
