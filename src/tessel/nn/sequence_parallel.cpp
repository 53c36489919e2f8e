#include "tessel/nn/sequence_parallel.h"

#include "tessel/core/profiler.h"

namespace tessel::nn {

int64_t sequence_shard_rows(int64_t rows, int tp_size) {
  TESSEL_CHECK(rows % tp_size == 0,
               "sequence parallelism: {} tokens per micro-batch (micro_batch_size x seq_length) do not split over "
               "tensor_model_parallel_size {}", rows, tp_size);
  return rows / tp_size;
}

Tensor sequence_all_gather(const Tensor& shard, comm::Communicator& tp) {
  ProfileScope prof("sp_all_gather");
  TESSEL_CHECK(shard.dim() == 2 && shard.is_contiguous(),
               "sequence_all_gather: expected a contiguous 2-D shard, got {}", shard.str());
  Tensor full = Tensor::empty({shard.size(0) * tp.size(), shard.size(1)}, shard.dtype());
  tp.all_gather(shard.device_ptr(), full.device_ptr(), shard.numel(), shard.dtype());
  return full;
}

Tensor sequence_reduce_scatter(const Tensor& full, comm::Communicator& tp) {
  ProfileScope prof("sp_reduce_scatter");
  TESSEL_CHECK(full.dim() == 2 && full.dtype() == DType::f32 && full.is_contiguous(),
               "sequence_reduce_scatter: expected contiguous f32 [N, d], got {}", full.str());
  Tensor shard = Tensor::empty({sequence_shard_rows(full.size(0), tp.size()), full.size(1)}, DType::f32);
  tp.reduce_scatter(full.device_ptr(), shard.device_ptr(), shard.numel(), DType::f32, comm::ReduceOp::sum);
  return shard;
}

}  // namespace tessel::nn
