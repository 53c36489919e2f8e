#pragma once
// Data-parallel gradient reduction in buckets, overlapped with backward: backward reports each flat
// range of the gradient buffer as soon as it is final (last layer first); ranges are gathered into
// buckets of at least `bucket_elems` elements and each full bucket's all-reduce (sum) starts at
// once, non-blocking, while backward continues (each report also tests the in-flight ones, which is
// what lets MPI progress them). finish() starts the rest and waits for all.
//
// With the distributed optimizer (owner_counts: the elements of the flat buffer each rank's shard
// holds, in rank order) a bucket is not all-reduced but reduced to the ranks owning its parts, one
// non-blocking reduce per part: each rank ends with the summed gradients of its own shard, the bytes
// of a reduce-scatter, overlapped with backward as the all-reduces are.
#include <memory>
#include <vector>

#include "tessel/comm/communicator.h"
#include "tessel/core/tensor.h"

namespace tessel::optim {

class GradReducer {
 public:
  // grads: the flat f32 gradient buffer (on its device); ranges are element offsets into it.
  GradReducer(comm::Communicator& dp, Tensor grads, int64_t bucket_elems, std::vector<int64_t> owner_counts = {});
  void ready(int64_t begin, int64_t end);
  void finish();
  int64_t buckets_launched() const { return launched_; }

 private:
  void launch();
  comm::Communicator& dp_;
  Tensor grads_;
  int64_t bucket_elems_;
  std::vector<int64_t> owner_begin_;  // owner mode: where each rank's shard starts, and the end
  int64_t lo_ = -1, hi_ = -1;  // the bucket being filled: [lo_, hi_)
  std::vector<std::unique_ptr<comm::Work>> inflight_;
  int64_t launched_ = 0;
};

}  // namespace tessel::optim
