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
//
// Under expert parallelism the flat buffer is cut into units, each reduced over its own group (the
// replicated parameters over the data-parallel ranks, routed experts over the ranks holding the same
// experts): a bucket launches one collective (or one per owner) for each unit it overlaps. Every rank
// of a group has the same units and reports the same ranges, so each group sees one order.
#include <memory>
#include <vector>

#include "tessel/comm/communicator.h"
#include "tessel/core/tensor.h"

namespace tessel::optim {

class GradReducer {
 public:
  // Flat range [begin, end) reduced over `group` (null: this rank alone holds it, nothing to do):
  // all-reduced when owner_counts is empty, else reduced to its owners (rank r of the group owns
  // owner_counts[r] elements from begin on, in rank order).
  struct Unit {
    comm::Communicator* group = nullptr;
    int64_t begin = 0, end = 0;
    std::vector<int64_t> owner_counts;
  };
  // grads: the flat f32 gradient buffer (on its device); ranges are element offsets into it. units
  // tile it in order.
  GradReducer(Tensor grads, int64_t bucket_elems, std::vector<Unit> units);
  // One unit, the whole buffer over dp.
  GradReducer(comm::Communicator& dp, Tensor grads, int64_t bucket_elems, std::vector<int64_t> owner_counts = {});
  void ready(int64_t begin, int64_t end);
  void finish();
  int64_t buckets_launched() const { return launched_; }

 private:
  void launch();
  struct Reduced {
    comm::Communicator* group;
    int64_t begin, end;
    std::vector<int64_t> owner_begin;  // owner mode: where each rank's block starts, and the end; else empty
  };
  Tensor grads_;
  int64_t bucket_elems_;
  std::vector<Reduced> units_;  // those with a group
  int64_t lo_ = -1, hi_ = -1;  // the bucket being filled: [lo_, hi_)
  std::vector<std::unique_ptr<comm::Work>> inflight_;
  int64_t launched_ = 0;
};

}  // namespace tessel::optim
