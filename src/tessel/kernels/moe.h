#pragma once
// Mixture-of-Experts routing (DeepSeek-V3 report section 2.1.2; Mixtral): per token t, affinities
// s[t, e] from the router logits u[t, e] (softmax over experts, or sigmoid), top-k experts chosen on
// s + bias (the bias steers selection only: auxiliary-loss-free balancing), optionally within the
// best `group_topk` of `num_groups` expert groups (a group scores the sum of its two best selection
// scores: node-limited routing), gate weights w = s of the chosen experts, normalised to sum 1 when
// asked, times scaling_factor.
#include <cstdint>
#include <vector>

namespace tessel::kernels {

struct RouterConfig {
  int64_t experts = 8, topk = 2;
  bool sigmoid = false;      // false: softmax over all experts
  bool normalize = true;     // gate weights of the chosen experts divided by their sum
  float scaling_factor = 1.0f;
  int64_t num_groups = 1, group_topk = 1;  // group-limited selection (1 group: none)
};

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

// Permutation of token copies into expert order (stable: by expert, then token, then slot).
//   order[p] = t * k + j: the copy at position p is token t's j-th choice; counts[e]: copies of expert e.
void expert_order(int64_t N, int64_t k, int64_t E, const int32_t* chosen, std::vector<int64_t>& order,
                  std::vector<int64_t>& counts);

}  // namespace tessel::kernels
