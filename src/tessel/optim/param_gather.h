#pragma once
// The distributed optimizer's parameter all-gather, overlapped with the next forward
// (parallel.overlap_param_gather, as Megatron-LM's overlap_param_gather): after the update each rank
// holds the new values of its own shard only. launch() starts, per bucket of the flat compute copy in
// the order the forward reads them (the embedding, each layer, then the final norm, head and MTP
// modules), one non-blocking in-place all-gather per shard unit the bucket overlaps, over that unit's
// group (under expert parallelism the replicated parameters over the data-parallel ranks, routed
// experts over the ranks holding the same experts: nn::FlatShard). The forward waits for a bucket
// just before the part that reads it (wait_for), testing the later ones on the way so MPI progresses
// them. Buckets are gathered whole even where a rank owns none of them (its count is 0 there). Every
// rank of a group has the same units and buckets, so each group sees its collectives in one order.
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "tessel/comm/communicator.h"
#include "tessel/core/tensor.h"

namespace tessel::optim {

class ParamGather {
 public:
  // A flat range [begin, begin + sum(counts)) sharded over `group`: rank r of it owns counts[r]
  // elements, contiguous in rank order. A null group: this rank holds all of it (nothing to gather).
  struct Unit {
    comm::Communicator* group = nullptr;
    int64_t begin = 0;
    std::vector<int64_t> counts;
  };
  // units: tiling the flat range in order; buckets: flat ranges [begin, end) tiling it, in forward order.
  ParamGather(std::vector<Unit> units, std::vector<std::pair<int64_t, int64_t>> buckets);
  ~ParamGather();  // waits for anything still in flight (the buffers outlive it)

  // Starts the gather of every bucket of flat (element i: parameter i), after `first` (gathers that
  // every wait_for waits for before its own buckets: the fp32 copy of the parameters read in fp32).
  void launch(const Tensor& flat, std::vector<std::unique_ptr<comm::Work>> first = {});
  // Returns once every bucket overlapping [begin, end) has arrived. Cheap when nothing is pending.
  void wait_for(int64_t begin, int64_t end);
  void wait_all();
  bool pending() const { return pending_ > 0; }
  const std::vector<std::pair<int64_t, int64_t>>& buckets() const { return buckets_; }

 private:
  void wait_first();
  struct Sharded {
    comm::Communicator* group;
    std::vector<int64_t> owner_begin;  // flat: where each rank's block starts, and the unit's end
  };
  std::vector<Sharded> units_;
  int64_t numel_ = 0;
  std::vector<std::pair<int64_t, int64_t>> buckets_;
  std::vector<std::unique_ptr<comm::Work>> first_;
  std::vector<std::vector<std::unique_ptr<comm::Work>>> inflight_;  // inflight_[b]: bucket b's (empty: arrived)
  int64_t pending_ = 0;
  size_t next_test_ = 0;
};

}  // namespace tessel::optim
