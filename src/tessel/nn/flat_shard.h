#pragma once
// FlatShard: which elements of a ParamStore's flat range one rank owns under the distributed
// optimizer (ZeRO-1, as Megatron-LM's), and where it keeps them.
//
// The flat range is cut into regions, each sharded over the ranks that hold identical copies of it:
//   region 0: every parameter but the routed experts, over the data-parallel group;
//   region 1: under expert parallelism, the routed experts (ParamSpec.expert), over the ranks that
//             hold the same experts (expert-data-parallel: data-parallel size / expert-parallel size).
// So, as in Megatron-LM, the replicated parameters' optimizer state is divided by the whole data-
// parallel size, not by the expert-data-parallel size. A region is its parameters in flat order (its
// "region order"); rank r of its group owns block r of it (ParamStore::shard_counts). Without expert
// parallelism there is one region, the whole flat range in flat order.
//
// The rank keeps what it owns packed, region after region (its fp32 masters when sharded, its Adam
// moments): local element 0 is the first element of its block of region 0.
// Invariants: a parameter lies in one region, so its owned part is one flat range (part_of); a rank
// that owns everything (groups of size 1) has one region, so its local order is the flat order.
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
  // A flat range [flat_begin, flat_end) of one region, starting at region_pos in region order.
  struct Segment {
    int64_t flat_begin, flat_end, region_pos;
  };
  struct Region {
    std::vector<Segment> segments;  // in region order, adjacent parameters merged
    int64_t numel = 0;
    std::vector<int64_t> counts;    // the block of each rank of the region's group
    int rank = 0;                   // this rank's block: [own_begin, own_end) in region order
    int64_t own_begin = 0, own_end = 0;
    int64_t local_begin = 0;        // where this rank's block starts in its packed buffers
    // True when the region is the flat range [segments[0].flat_begin, + numel) in flat order: its
    // collectives can run on the flat buffers in place.
    bool contiguous() const { return segments.size() <= 1; }
  };
  // The owned part of one parameter: flat [flat_begin, flat_end), kept at local_begin.
  struct Part {
    int64_t flat_begin, flat_end, local_begin;
  };

  FlatShard() = default;  // an empty range
  // One region, the whole range, of which this rank owns [begin, end) (begin = 0, end = numel:
  // everything, the optimizer of an unsharded run).
  static FlatShard block(int64_t numel, int64_t begin, int64_t end);
  // The distributed optimizer's shard of `specs` (the store's parameters, in flat order, covering
  // [0, numel)): region 0 over `replicated`, region 1 (only if some parameter is an expert) over `experts`.
  FlatShard(const std::vector<ParamSpec>& specs, int64_t numel, ShardGroup replicated, ShardGroup experts);

  int64_t numel() const { return numel_; }
  int64_t local_numel() const { return local_numel_; }
  bool owns_all() const { return local_numel_ == numel_; }
  const std::vector<Region>& regions() const { return regions_; }
  // The region a parameter belongs to.
  size_t region_of(const ParamSpec& s) const;
  std::optional<Part> part_of(const ParamSpec& s) const;
  // The flat ranges making up region positions [pos_begin, pos_end) of region r, in region order:
  // fn(flat_begin, flat_end, region_pos).
  template <class Fn>
  void for_each_flat(size_t r, int64_t pos_begin, int64_t pos_end, Fn fn) const {
    for (const Segment& g : regions_[r].segments) {
      const int64_t n = g.flat_end - g.flat_begin;
      const int64_t b = std::max(pos_begin, g.region_pos), e = std::min(pos_end, g.region_pos + n);
      if (b < e) fn(g.flat_begin + (b - g.region_pos), g.flat_begin + (e - g.region_pos), b);
    }
  }
  // "[7, 14) of 21" or, with two regions, "[3, 6) of 12 and [1, 2) of 4 experts": for messages.
  std::string describe() const;

 private:
  int64_t numel_ = 0, local_numel_ = 0;
  std::vector<Region> regions_;
  void place_blocks();  // local_begin of each region, local_numel_
};

}  // namespace tessel::nn
