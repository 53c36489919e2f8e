#pragma once
// FlatShard: which elements of a ParamStore's flat range one rank owns under the distributed
// optimizer (ZeRO-1, as Megatron-LM's), and where it keeps them.
//
// Parameters are sharded over the ranks that hold identical copies of them:
//   the replicated parameters (everything but the routed experts) over the data-parallel group;
//   under expert parallelism the routed experts (ParamSpec.expert) over the ranks that hold the same
//   experts (expert-data-parallel: data x context parallel size / expert-parallel size).
// So, as in Megatron-LM, the replicated parameters' optimizer state is divided by the whole data-
// parallel size, not by the expert-data-parallel size. The flat range is cut into units, the runs of
// adjacent parameters of one kind (without expert parallelism: one unit, the whole range; with it,
// about two per MoE layer); rank r of a unit's group owns block r of it (ParamStore::shard_counts).
// Each unit's collectives then run in place on the flat buffers (a reduce-scatter of its gradients,
// an all-gather of its parameters), with no packed copy of a whole kind.
//
// The rank keeps what it owns packed, unit after unit (its fp32 masters when sharded, its Adam
// moments): local element 0 is the first element of its block of the first unit.
// Invariants: a parameter lies in one unit, so its owned part is one flat range (part_of); a rank
// that owns everything (groups of size 1) has one unit, so its local order is the flat order.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tessel::nn {

struct ParamSpec;

// A rank's place in a group of `size` ranks.
struct ShardGroup {
  int rank = 0;
  int size = 1;
};

class FlatShard {
 public:
  // Adjacent parameters of one kind, flat [flat_begin, flat_end), sharded over one group.
  struct Unit {
    int64_t flat_begin = 0, flat_end = 0;
    bool experts = false;            // sharded over the experts' group (else the replicated parameters')
    std::vector<int64_t> counts;     // the block of each rank of the group, in rank order
    int64_t own_begin = 0, own_end = 0;  // this rank's block, flat
    int64_t local_begin = 0;         // where it starts in the packed buffers
    int64_t numel() const { return flat_end - flat_begin; }
  };
  // The owned part of one parameter: flat [flat_begin, flat_end), kept at local_begin.
  struct Part {
    int64_t flat_begin, flat_end, local_begin;
  };

  FlatShard() = default;  // an empty range
  // One unit, the whole range, of which this rank owns [begin, end) (begin = 0, end = numel:
  // everything, the optimizer of an unsharded run).
  static FlatShard block(int64_t numel, int64_t begin, int64_t end);
  // The distributed optimizer's shard of `specs` (the store's parameters, in flat order, covering
  // [0, numel)): the replicated parameters over `replicated`, routed experts over `experts`.
  FlatShard(const std::vector<ParamSpec>& specs, int64_t numel, ShardGroup replicated, ShardGroup experts);

  int64_t numel() const { return numel_; }
  int64_t local_numel() const { return local_numel_; }
  bool owns_all() const { return local_numel_ == numel_; }
  const std::vector<Unit>& units() const { return units_; }
  std::optional<Part> part_of(const ParamSpec& s) const;
  // "[7, 14) of 21" for one unit; "8 of 20 elements in 5 units: [1, 2), [7, 10), ..." otherwise
  // (for messages: it names at most four ranges).
  std::string describe() const;
  // The same elements owned, kept at the same places.
  bool same_ownership(const FlatShard& o) const;

 private:
  int64_t numel_ = 0, local_numel_ = 0;
  std::vector<Unit> units_;
};

}  // namespace tessel::nn
