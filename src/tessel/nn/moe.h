#pragma once
// Mixture-of-Experts block (replaces the MLP of a transformer layer; DeepSeek-V3 / Mixtral):
//   router    logits = y @ W_r^T in fp32 (W_r [E, d] "gate.weight"), kernels/moe.h for selection
//   experts   E SwiGLU MLPs of moe_ffn_hidden_size ("experts.<e>.{gate,up,down}_proj"), each run on
//             its tokens only: the token copies are permuted into expert order and every expert's
//             contiguous group is one GEMM (a grouped GEMM)
//   shared    an optional SwiGLU MLP every token goes through ("shared_experts")
//   out[t] = sum_j w[t, j] expert_{e_j}(y[t]) + shared(y[t])
// Balancing: the sequence-wise auxiliary loss (moe_aux_loss_coeff; "aux_loss": the micro-batch as
// one sequence) and the router z-loss add their gradients to the router; with
// moe_router_enable_expert_bias a per-expert bias steers selection only and moves by +-gamma after
// each step from the step's load (end_step), the auxiliary-loss-free method.
// Expert parallelism (ep): rank r of the group holds experts [r E/n, (r+1) E/n); every rank routes
// its own tokens, the copies go to the experts' ranks with an all-to-all(v) over the group, come back
// the same way, and are combined where they came from (backward: the same two exchanges).
// Under tensor parallelism (tp) the experts are split like the MLP (model.expert_tensor_parallel,
// Megatron's expert tensor parallelism: gate/up column-parallel, down row-parallel, the shared expert
// too): without sequence parallelism every rank of the group routes the same rows and runs its
// slice of each expert on them; with it each rank routes its own rows, the copies of every local
// expert are all-gathered over the group, run through the expert slices (whose row-parallel output
// and column-parallel input gradient are all-reduced), and each rank keeps its own copies' rows.
// Or replicated (expert_tensor_parallel off): every rank runs whole experts on its rows (the same
// rows, or with sequence parallelism its own, the replicated gradients then summed over the group).
// The balance losses under sequence parallelism (sp: rank r holds rows [r N, (r+1) N) of the
// context-parallel rank's rows) and context parallelism (cp: every sequence's tokens spread over the
// group, seq_length / cp per rank): each sequence's token counts per expert are summed over sp and
// cp, then every rank takes the loss and its gradient on its own rows (the loss is a sum over rows).
// Dropping (moe_expert_capacity_factor > 0, Switch Transformer / Megatron): each expert takes at most
// ceil(factor x N k / E) of this rank's copies, keeping the largest gate weights ("probs") or the
// earliest tokens ("position"); a dropped copy contributes nothing (the residual carries the token).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessel/core/deep_const.h"
#include "tessel/core/transfer_spans.h"
#include "tessel/kernels/moe.h"
#include "tessel/nn/alike_calls.h"
#include "tessel/nn/layer_blocks.h"
#include "tessel/nn/mlp.h"

namespace tessel::nn {

// Where the routing of a device without values (meta) comes from. Routing reaches the host once
// per forward (the expert order and the rows per expert size every buffer and collective after
// it). A real run can record each Moe::forward's final routing (after capacity dropping), in call
// order; a meta run replaying the recording routes exactly as the real run did, so its memory and
// collectives are the real run's. Without a recording the meta device routes in balance: copy
// c = t k + j of token t goes to expert c mod E (every expert N k / E copies, +-1), or with the
// skew a MetaRoutingSkewScope sets (below).
class MoeRoutingTrace {
 public:
  enum class Mode { record, replay };
  explicit MoeRoutingTrace(Mode mode) : mode_(mode) {}
  Mode mode() const { return mode_; }
  void set_mode(Mode mode) {
    mode_ = mode;
    cursor_ = 0;
  }
  void add(std::vector<int32_t> routed) { calls_.push_back(std::move(routed)); }
  // The next recorded routing; refuses, naming the block, one of another size or past the end.
  const std::vector<int32_t>& next(const std::string& block, int64_t copies);
  size_t calls() const { return calls_.size(); }

 private:
  Mode mode_;
  std::vector<std::vector<int32_t>> calls_;
  size_t cursor_ = 0;
};

// The trace this thread's MoE blocks record to or replay from while the scope lives (scopes nest).
class MoeRoutingTraceScope {
 public:
  explicit MoeRoutingTraceScope(MoeRoutingTrace* trace);
  ~MoeRoutingTraceScope();
  MoeRoutingTraceScope(const MoeRoutingTraceScope&) = delete;
  MoeRoutingTraceScope& operator=(const MoeRoutingTraceScope&) = delete;

 private:
  MoeRoutingTrace* previous_;
};
MoeRoutingTrace* current_moe_routing_trace();

// How the meta device routes without a recording: in balance (skew 1), or skewed, expert 0 of every
// MoE block taking `skew` times the mean share of the copies (N k / E) and the other experts the
// rest evenly: the hottest expert a run must hold memory for. Under expert parallelism the rank
// holding expert 0 then receives that share from every rank (the meta communicator's rule: every
// rank routes as this one does). Set for this thread while the scope lives; skew is in
// [1, E / k] (expert 0 can take at most one copy of each token).
class MetaRoutingSkewScope {
 public:
  explicit MetaRoutingSkewScope(double skew);
  ~MetaRoutingSkewScope();
  MetaRoutingSkewScope(const MetaRoutingSkewScope&) = delete;
  MetaRoutingSkewScope& operator=(const MetaRoutingSkewScope&) = delete;

 private:
  double previous_;
};
double current_meta_routing_skew();

// The meta routing of N tokens' k copies over E experts at `skew` (above), as chosen experts in
// copy order (c = t k + j): every token's k experts distinct. skew 1 is the balanced c mod E.
std::vector<int32_t> meta_routing(int64_t N, int64_t k, int64_t E, double skew);
// The copies per expert of balanced meta routing (skew 1), without listing them: what counting
// meta_routing(N, k, E, 1.0) gives.
std::vector<int64_t> meta_balanced_counts(int64_t N, int64_t k, int64_t E);

class Moe final : public MlpBlock {
 public:
  Moe(ParamStore& ps, const std::string& prefix, const ModelConfig& cfg, int64_t layer_count,
      comm::Communicator* ep = nullptr, comm::Communicator* tp = nullptr, comm::Communicator* cp = nullptr);

  // y [N, d] (N = B x seq rows) -> [N, d] f32. grad_scale: the loss scale of this micro-batch (the
  // auxiliary losses' gradients use it); the auxiliary losses' values accumulate into aux_loss().
  // recomputing: a second forward of the same micro-batch (activation recompute) that rebuilds what
  // backward needs without counting loads and loss values again.
  Tensor forward(const Tensor& y, float grad_scale, Activations& saved, bool recomputing = false);
  Tensor forward(const LinearInput& y, float grad_scale, Activations& saved, bool recomputing) override;
  Tensor backward_input(const Tensor& dout, Activations& saved) override;
  void backward_weight(Activations& saved) override;

  // After every micro-batch of a step: the step's tokens per expert summed over `groups`, the
  // expert bias moved (when enabled), the load statistic returned (max / mean tokens per expert)
  // and the counters reset. Collective over every group.
  double end_step(const std::vector<comm::Communicator*>& groups);
  double take_aux_loss();  // the step's auxiliary losses (summed over micro-batches), then reset
  int64_t first_local_expert() const { return first_; }
  std::vector<float>& expert_bias() { return bias_; }
  const std::vector<float>& expert_bias() const { return bias_; }
  const std::string& prefix() const { return prefix_; }

 private:
  DeepConstPtr<ParamStore> ps_;  // const methods see a const store (core/deep_const.h)
  std::string prefix_;
  kernels::RouterConfig rc_;
  int64_t d_, seq_;
  int64_t router_offset_;
  // Runs the local experts on rows grouped by local expert (counts per local expert); saved for backward.
  Tensor run_experts(const Tensor& x, const std::vector<int64_t>& counts, Activations& saved);
  Tensor experts_backward(const Tensor& dy, const std::vector<int64_t>& counts, Activations& saved);
  // Expert parallelism: rows in expert order (counts per global expert) to the experts' ranks and
  // back. dispatch returns the received rows grouped by local expert and the per-(source, local
  // expert) counts; combine is its inverse.
  Tensor dispatch(const Tensor& rows, const std::vector<int64_t>& counts, std::vector<int64_t>& recv_counts) const;
  Tensor combine(const Tensor& rows, const std::vector<int64_t>& counts, const std::vector<int64_t>& recv_counts) const;
  void exchange(const void* in, const std::vector<int64_t>& send_counts, void* out,
                const std::vector<int64_t>& recv_counts, DType t, TracedTransfer what) const;
  // The balance loss of these N rows (value and gradient into dscores), counts summed over sp_ and cp_.
  double balance_loss(const Tensor& scores, const Tensor& chosen, float grad_scale, const Tensor& dscores) const;
  // The routing copied to the host (chosen [N, k]; on meta: replayed or balanced, see
  // MoeRoutingTrace), the step's load counted when `count`, copies over capacity sent to bucket E.
  std::vector<int32_t> host_routing(const Tensor& chosen, const Tensor& weights, bool count);
  comm::Communicator* ep_ = nullptr;
  comm::Communicator *sp_ = nullptr, *cp_ = nullptr;
  comm::Communicator* etp_ = nullptr;  // experts split over this tensor-parallel group
  // Split experts without sequence parallelism: every rank routed the same rows, so the per-expert
  // counts agree (the experts' collectives depend on it); an error rather than a hang if not.
  void check_same_routing(const std::vector<int64_t>& counts) const;
  // Sequence parallelism with split experts: x grouped by local expert (counts each) -> every tp
  // rank's copies, grouped by local expert then rank; gathered_counts[s * local_ + e]. keep_own is
  // the inverse for outputs: this rank's copies' rows of a tensor in that gathered order.
  Tensor gather_copies(const Tensor& x, const std::vector<int64_t>& counts, std::vector<int64_t>& gathered_counts) const;
  Tensor keep_own(const Tensor& rows, const std::vector<int64_t>& gathered_counts) const;
  // fn(e, rows of local expert e) over x grouped by local expert (counts each), through the gathered
  // copies when needed; ran (optional): the rows each expert ran. Experts in a row with equal
  // counts are calls alike (alike_calls.h).
  Tensor over_gathered(const Tensor& x, const std::vector<int64_t>& counts, Activations& saved,
                       const std::function<Tensor(size_t, const Tensor&)>& fn,
                       std::vector<int64_t>* ran = nullptr);
  // fn(e) for each local expert with counts[e] > 0, experts in a row with equal counts as calls alike.
  void for_experts(const std::vector<int64_t>& counts, bool meta, Activations& saved,
                   const std::function<void(size_t)>& fn);
  MetaBytesHeld meta_cached_;  // for experts run as alike calls on meta: their cached FP8 weights
  int64_t first_ = 0, local_ = 0;  // this rank's experts [first_, first_ + local_)
  std::vector<DeepConstOwner<Mlp>> experts_;
  DeepConstOwner<Mlp> shared_;
  std::string balance_;
  float alpha_, z_coeff_, gamma_;
  bool use_bias_;
  double capacity_factor_;  // 0: no dropping
  bool drop_by_probs_;      // else by position
  // Sends the copies beyond each expert's capacity to bucket E (dropped), by gate weight or position.
  void drop_over_capacity(int64_t N, const float* weights, std::vector<int32_t>& routed) const;
  std::vector<float> bias_;
  std::vector<int64_t> load_;  // tokens per expert this step
  double aux_loss_ = 0;
};

}  // namespace tessel::nn
