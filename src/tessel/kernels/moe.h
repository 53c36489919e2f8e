#pragma once
// Mixture-of-Experts routing (DeepSeek-V3 report section 2.1.2; Mixtral): per token t, affinities
// s[t, e] from the router logits u[t, e] (softmax over experts, or sigmoid), top-k experts chosen on
// s + bias (the bias steers selection only: auxiliary-loss-free balancing), optionally within the
// best `group_topk` of `num_groups` expert groups (a group scores the sum of its two best selection
// scores: node-limited routing), gate weights w = s of the chosen experts, normalised to sum 1 when
// asked, times scaling_factor.
#include <cstdint>
#include <vector>

#include "tessel/core/tensor.h"

namespace tessel::kernels {

struct RouterConfig {
  int64_t experts = 8, topk = 2;
  bool sigmoid = false;      // false: softmax over all experts
  bool normalize = true;     // gate weights of the chosen experts divided by their sum
  float scaling_factor = 1.0f;
  int64_t num_groups = 1, group_topk = 1;  // group-limited selection (1 group: none)
};

// The family's dispatch points (kernels/moe.cpp), as contiguous tensors on one device. Shapes as in
// the cpu kernels below: logits, scores, dscores, dlogits [N, E] f32; chosen [N, k] i32; weights,
// dweights [N, k] f32; row_seq [N] i64; counts [S * E] f32. host_bias: E floats on the host (the
// expert bias is host state; a device keeps its copy) or null. Values that reach the host (the
// losses) are the return value: an explicit copy; on meta there is none (0).
void router_forward(const RouterConfig& c, const Tensor& logits, const float* host_bias, const Tensor& scores,
                    const Tensor& chosen, const Tensor& weights);
void router_weights_backward(const RouterConfig& c, const Tensor& scores, const Tensor& chosen, const Tensor& dweights,
                             const Tensor& dscores);
void router_scores_backward(const RouterConfig& c, const Tensor& scores, const Tensor& dscores, const Tensor& dlogits);
void balance_counts(const RouterConfig& c, const Tensor& row_seq, const Tensor& chosen, const Tensor& counts);
double balance_loss_rows(const RouterConfig& c, const Tensor& row_seq, int64_t T, float alpha, const Tensor& scores,
                         const Tensor& counts, float grad_scale, const Tensor& dscores);
// Router z-loss (ST-MoE, Zoph et al. 2022): coeff x logsumexp(u_t)^2 x grad_scale summed over tokens
// (returned), its gradient added into daux [N, E].
double router_z_loss(const Tensor& logits, float coeff, float grad_scale, const Tensor& daux);
// Token copies in expert order (index: i64 [n], rows of src): out [n, d] = src[index] (any dtype);
// scatter_add_rows: out [M, d] f32 += src [n, d] f32 at rows index, in row order.
void gather_rows(const Tensor& src, const Tensor& index, const Tensor& out);
void scatter_add_rows(const Tensor& src, const Tensor& index, const Tensor& out);
// The gate-weighted sum of the experts' outputs: copies [n] i64 holds each output row's copy
// c = t * k + j; out [N, d] f32 += weights[c] x outputs[p] at row t. Backward: dweights[c] (written)
// = dout[t] . outputs[p] (double accumulation), dcopy [n, d] = weights[c] x dout[t].
void moe_weighted_sum(const Tensor& outputs, const Tensor& copies, const Tensor& weights, const Tensor& out);
void moe_weighted_sum_backward(const Tensor& dout, const Tensor& outputs, const Tensor& copies, const Tensor& weights,
                               const Tensor& dweights, const Tensor& dcopy);

// The cpu kernels (kernels/cpu/moe.cpp) on raw arrays.

// logits [N, E] f32; bias [E] or null. Writes scores [N, E] (the affinities s), chosen [N, k] (expert
// ids, best first) and weights [N, k].
void router_forward(const RouterConfig& c, int64_t N, const float* logits, const float* bias, float* scores,
                    int32_t* chosen, float* weights);

// dweights [N, k] -> dscores [N, E] (accumulated into), through normalisation and scaling.
void router_weights_backward(const RouterConfig& c, int64_t N, const float* scores, const int32_t* chosen,
                             const float* dweights, float* dscores);
// dscores [N, E] -> dlogits [N, E] (written): the softmax or sigmoid Jacobian.
void router_scores_backward(const RouterConfig& c, int64_t N, const float* scores, const float* dscores,
                            float* dlogits);

// Sequence-wise balance loss (DeepSeek-V3 eq. 17-20) for rows [N = B x T] in sequences of T tokens:
//   L = alpha sum_seq sum_i f_i P_i,  f_i = E / (k T) x (tokens of the sequence routed to i),
//   P_i = mean over the sequence of s'[t, i] = s[t, i] / sum_j s[t, j].
// Returns L (summed over sequences); adds dL/ds x grad_scale into dscores (f_i held constant).
double sequence_balance_loss(const RouterConfig& c, int64_t N, int64_t T, float alpha, const float* scores,
                             const int32_t* chosen, float grad_scale, float* dscores);
// The same loss in two parts, for rows that hold only pieces of their sequences (sequence or
// context parallelism: the counts are summed over the ranks holding the other pieces in between).
// row_seq[t]: row t's sequence in [0, S). balance_counts adds row t's routed copies into
// counts [S, E]; balance_loss_rows returns these rows' share of L (the whole L summed over the
// ranks), f from the counts of sequences of T tokens, and adds dL/ds x grad_scale into dscores.
void balance_counts(const RouterConfig& c, int64_t N, const int64_t* row_seq, const int32_t* chosen, float* counts);
double balance_loss_rows(const RouterConfig& c, int64_t N, const int64_t* row_seq, int64_t T, float alpha,
                         const float* scores, const float* counts, float grad_scale, float* dscores);

double router_z_loss(int64_t N, int64_t E, const float* logits, float coeff, float grad_scale, float* daux);
void gather_rows(int64_t n, size_t row_bytes, const void* src, const int64_t* index, void* out);
void scatter_add_rows(int64_t n, int64_t d, const float* src, const int64_t* index, float* out);
void moe_weighted_sum(int64_t n, int64_t d, int64_t k, const float* outputs, const int64_t* copies,
                      const float* weights, float* out);
void moe_weighted_sum_backward(int64_t n, int64_t d, int64_t k, const float* dout, const float* outputs,
                               const int64_t* copies, const float* weights, float* dweights, float* dcopy);

// Permutation of token copies into expert order (host: the routing is copied to the host first) (stable: by expert, then token, then slot).
//   order[p] = t * k + j: the copy at position p is token t's j-th choice; counts[e]: copies of expert e.
void expert_order(int64_t N, int64_t k, int64_t E, const int32_t* chosen, std::vector<int64_t>& order,
                  std::vector<int64_t>& counts);

}  // namespace tessel::kernels
