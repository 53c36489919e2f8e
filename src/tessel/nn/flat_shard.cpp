#include "tessel/nn/flat_shard.h"

#include <fmt/format.h>

#include "tessel/core/check.h"
#include "tessel/nn/params.h"

namespace tessel::nn {

namespace {
// Cuts unit u among the ranks of `group`, this rank's block, and where it goes in the packed buffers.
void place(FlatShard::Unit& u, ShardGroup group, int64_t& local) {
  u.counts = ParamStore::shard_counts(u.numel(), group.size);
  u.own_begin = u.flat_begin;
  for (int k = 0; k < group.rank; ++k) u.own_begin += u.counts[size_t(k)];
  u.own_end = u.own_begin + u.counts[size_t(group.rank)];
  u.local_begin = local;
  local += u.own_end - u.own_begin;
}
}  // namespace

FlatShard FlatShard::block(int64_t numel, int64_t begin, int64_t end) {
  TESSEL_CHECK(0 <= begin && begin <= end && end <= numel, "owned range [{}, {}) outside [0, {})", begin, end, numel);
  FlatShard f;
  f.numel_ = numel;
  Unit u;
  u.flat_end = numel;
  u.counts = {numel};
  u.own_begin = begin;
  u.own_end = end;
  f.units_.push_back(std::move(u));
  f.local_numel_ = end - begin;
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
  int64_t covered = 0;
  for (const auto& s : specs) {
    TESSEL_CHECK(s.offset == covered, "FlatShard: parameter '{}' at {}, expected {} (specs in flat order, adjacent)",
                 s.name, s.offset, covered);
    covered += s.numel;
    if (units_.empty() || units_.back().experts != s.expert) {
      Unit u;
      u.flat_begin = u.flat_end = s.offset;
      u.experts = s.expert;
      units_.push_back(std::move(u));
    }
    units_.back().flat_end += s.numel;
  }
  TESSEL_CHECK(covered == numel, "FlatShard: the parameters cover {} of {} elements", covered, numel);
  for (Unit& u : units_) place(u, u.experts ? experts : replicated, local_numel_);
}

std::optional<FlatShard::Part> FlatShard::part_of(const ParamSpec& s) const {
  if (units_.empty() || s.numel == 0) return std::nullopt;
  // The unit holding the parameter: the last one starting at or before it.
  const auto it = std::upper_bound(units_.begin(), units_.end(), s.offset,
                                   [](int64_t at, const Unit& u) { return at < u.flat_begin; });
  TESSEL_CHECK(it != units_.begin() && s.offset + s.numel <= std::prev(it)->flat_end,
               "FlatShard: parameter '{}' [{}, {}) lies in no one unit", s.name, s.offset, s.offset + s.numel);
  const Unit& u = *std::prev(it);
  const int64_t b = std::max(s.offset, u.own_begin), e = std::min(s.offset + s.numel, u.own_end);
  if (b >= e) return std::nullopt;
  return Part{b, e, u.local_begin + (b - u.own_begin)};
}

bool FlatShard::same_ownership(const FlatShard& o) const {
  if (numel_ != o.numel_ || local_numel_ != o.local_numel_ || units_.size() != o.units_.size()) return false;
  for (size_t i = 0; i < units_.size(); ++i) {
    const Unit &a = units_[i], &b = o.units_[i];
    if (a.flat_begin != b.flat_begin || a.flat_end != b.flat_end || a.own_begin != b.own_begin ||
        a.own_end != b.own_end || a.local_begin != b.local_begin)
      return false;
  }
  return true;
}

std::string FlatShard::describe() const {
  if (units_.size() == 1) return fmt::format("[{}, {}) of {}", units_[0].own_begin, units_[0].own_end, numel_);
  std::string ranges;
  int shown = 0;
  for (const Unit& u : units_) {
    if (u.own_begin == u.own_end) continue;
    if (shown++ == 4) {
      ranges += ", ...";
      break;
    }
    ranges += fmt::format("{}[{}, {})", shown > 1 ? ", " : "", u.own_begin, u.own_end);
  }
  return fmt::format("{} of {} elements in {} units: {}", local_numel_, numel_, units_.size(), ranges);
}

}  // namespace tessel::nn
