#pragma once
// Sequence parallelism (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
// Transformer Models"): outside the tensor-parallel GEMMs (norms, residual adds, embedding output),
// rank r of a tensor-parallel group of n holds only rows [r N/n, (r+1) N/n) of the [N, d] activations
// (N = B*T tokens, in the [B, T] row order). Entering a column-parallel Linear the rows are
// all-gathered; leaving a row-parallel Linear the partial sums are reduce-scattered instead of
// all-reduced. The two are each other's backward. Parameters replicated over the group (norms,
// biases of row-parallel Linears, learned positions) then see only their rank's rows, so their
// gradients are summed over the group after backward.
#include "tessel/comm/communicator.h"
#include "tessel/core/tensor.h"

namespace tessel::nn {

// shard [N/n, d] -> [N, d] with rank k's rows at k N/n (f32 or bf16).
Tensor sequence_all_gather(const Tensor& shard, comm::Communicator& tp);
// full [N, d] f32 partial sums -> [N/n, d]: this rank's rows of the sum over the group.
Tensor sequence_reduce_scatter(const Tensor& full, comm::Communicator& tp);
// Rows of a rank's shard; throws naming the sizes when n does not divide N.
int64_t sequence_shard_rows(int64_t rows, int tp_size);

}  // namespace tessel::nn
