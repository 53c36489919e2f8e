#include "tessel/nn/flat_shard.h"

#include <fmt/format.h>

#include "tessel/core/check.h"
#include "tessel/nn/params.h"

namespace tessel::nn {

FlatShard FlatShard::block(int64_t numel, int64_t begin, int64_t end) {
  TESSEL_CHECK(0 <= begin && begin <= end && end <= numel, "owned range [{}, {}) outside [0, {})", begin, end, numel);
  FlatShard f;
  f.numel_ = numel;
  Region r;
  if (numel > 0) r.segments.push_back({0, numel, 0});
  r.numel = numel;
  r.own_begin = begin;
  r.own_end = end;
  f.regions_.push_back(std::move(r));
  f.place_blocks();
  return f;
}

FlatShard::FlatShard(const std::vector<ParamSpec>& specs, int64_t numel, ShardGroup replicated, ShardGroup experts)
    : numel_(numel) {
  for (const ShardGroup& g : {replicated, experts})
    TESSEL_CHECK(g.size >= 1 && g.rank >= 0 && g.rank < g.size, "shard group: rank {} of {}", g.rank, g.size);
  if (replicated.size == 1 && experts.size == 1) {  // not sharded: everything, in flat order
    *this = block(numel, 0, numel);
    return;
  }
  bool any_expert = false;
  for (const auto& s : specs) any_expert = any_expert || s.expert;
  regions_.resize(any_expert ? 2 : 1);
  int64_t covered = 0;
  for (const auto& s : specs) {
    TESSEL_CHECK(s.offset == covered, "FlatShard: parameter '{}' at {}, expected {} (specs in flat order, adjacent)",
                 s.name, s.offset, covered);
    covered += s.numel;
    Region& r = regions_[any_expert && s.expert ? 1 : 0];
    if (!r.segments.empty() && r.segments.back().flat_end == s.offset)
      r.segments.back().flat_end += s.numel;
    else
      r.segments.push_back({s.offset, s.offset + s.numel, r.numel});
    r.numel += s.numel;
  }
  TESSEL_CHECK(covered == numel, "FlatShard: the parameters cover {} of {} elements", covered, numel);
  for (size_t i = 0; i < regions_.size(); ++i) {
    Region& r = regions_[i];
    const ShardGroup& g = i == 0 ? replicated : experts;
    r.counts = ParamStore::shard_counts(r.numel, g.size);
    r.rank = g.rank;
    for (int k = 0; k < g.rank; ++k) r.own_begin += r.counts[size_t(k)];
    r.own_end = r.own_begin + r.counts[size_t(g.rank)];
  }
  place_blocks();
}

void FlatShard::place_blocks() {
  local_numel_ = 0;
  for (Region& r : regions_) {
    r.local_begin = local_numel_;
    local_numel_ += r.own_end - r.own_begin;
  }
}

size_t FlatShard::region_of(const ParamSpec& s) const { return regions_.size() > 1 && s.expert ? 1 : 0; }

std::optional<FlatShard::Part> FlatShard::part_of(const ParamSpec& s) const {
  if (regions_.empty() || s.numel == 0) return std::nullopt;
  const Region& r = regions_[region_of(s)];
  // The segment holding the parameter: the last one starting at or before it.
  const auto it = std::upper_bound(r.segments.begin(), r.segments.end(), s.offset,
                                   [](int64_t at, const Segment& g) { return at < g.flat_begin; });
  TESSEL_CHECK(it != r.segments.begin() && s.offset + s.numel <= std::prev(it)->flat_end,
               "FlatShard: parameter '{}' [{}, {}) is not in its region", s.name, s.offset, s.offset + s.numel);
  const int64_t pos = std::prev(it)->region_pos + (s.offset - std::prev(it)->flat_begin);
  const int64_t b = std::max(pos, r.own_begin), e = std::min(pos + s.numel, r.own_end);
  if (b >= e) return std::nullopt;
  return Part{s.offset + (b - pos), s.offset + (e - pos), r.local_begin + (b - r.own_begin)};
}

std::string FlatShard::describe() const {
  std::string out;
  for (size_t i = 0; i < regions_.size(); ++i) {
    const Region& r = regions_[i];
    out += fmt::format("{}[{}, {}) of {}{}", i ? " and " : "", r.own_begin, r.own_end, r.numel,
                       regions_.size() > 1 ? (i ? " expert elements" : " replicated elements") : "");
  }
  return out;
}

}  // namespace tessel::nn
