#include "tessel/optim/param_gather.h"

#include <algorithm>

#include "tessel/core/check.h"
#include "tessel/core/profiler.h"

namespace tessel::optim {

ParamGather::ParamGather(std::vector<Unit> units, std::vector<std::pair<int64_t, int64_t>> buckets)
    : buckets_(std::move(buckets)) {
  for (const Unit& u : units) {
    TESSEL_CHECK(u.begin == numel_, "ParamGather: units must tile the flat range in order; one at {} after {}",
                 u.begin, numel_);
    TESSEL_CHECK(!u.group || int(u.counts.size()) == u.group->size(), "ParamGather: {} owner counts for {} ranks",
                 u.counts.size(), u.group ? u.group->size() : 0);
    Sharded sh{u.group, {u.begin}};
    for (int64_t c : u.counts) sh.owner_begin.push_back(sh.owner_begin.back() + c);
    numel_ = sh.owner_begin.back();
    if (u.group) units_.push_back(std::move(sh));
  }
  int64_t at = 0;
  for (const auto& [b, e] : buckets_) {
    TESSEL_CHECK(b == at && e >= b, "ParamGather: buckets must tile the flat range in order; [{}, {}) after {}", b, e,
                 at);
    at = e;
  }
  TESSEL_CHECK(at == numel_, "ParamGather: buckets cover {} elements, the shards {}", at, numel_);
}

ParamGather::~ParamGather() {
  try {
    wait_all();
  } catch (...) {  // a failing wait while unwinding: the job is going down anyway
  }
}

void ParamGather::launch(const Tensor& flat, std::vector<std::unique_ptr<comm::Work>> first) {
  TESSEL_CHECK(!pending(), "ParamGather: launch while the previous gather is still in flight");
  TESSEL_CHECK(flat.numel() == numel_, "ParamGather: a buffer of {} elements for shards of {}", flat.numel(), numel_);
  first_ = std::move(first);
  inflight_.clear();
  const size_t es = dtype_size(flat.dtype());
  char* base = static_cast<char*>(flat.device_ptr());
  const comm::OverlappedCommScope behind_forward;
  for (const auto& [b, e] : buckets_) {
    std::vector<std::unique_ptr<comm::Work>> works;
    for (const Sharded& u : units_) {
      // The part of the bucket in this unit; each rank contributes what its block holds of it.
      const int64_t lo = std::max(b, u.owner_begin.front()), hi = std::min(e, u.owner_begin.back());
      if (lo >= hi) continue;
      std::vector<int64_t> counts(u.owner_begin.size() - 1);
      for (size_t r = 0; r < counts.size(); ++r)
        counts[r] = std::max<int64_t>(0, std::min(u.owner_begin[r + 1], hi) - std::max(u.owner_begin[r], lo));
      works.push_back(u.group->all_gather_v_async(base + size_t(lo) * es, counts, flat.dtype()));
    }
    inflight_.push_back(std::move(works));
  }
  pending_ = int64_t(std::count_if(inflight_.begin(), inflight_.end(), [](const auto& w) { return !w.empty(); }));
  if (!first_.empty() && pending_ == 0) pending_ = 1;  // only the first gathers: wait_for still takes them
  next_test_ = 0;
}

void ParamGather::wait_first() {
  for (auto& w : first_) w->wait();
  first_.clear();
}

void ParamGather::wait_for(int64_t begin, int64_t end) {
  if (!pending()) return;
  ProfileScope prof("param_gather_wait");  // exposed: the forward waits here
  wait_first();
  for (size_t i = 0; i < buckets_.size(); ++i) {
    if (buckets_[i].second <= begin || buckets_[i].first >= end) continue;
    for (auto& w : inflight_[i]) w->wait();
    inflight_[i].clear();
  }
  pending_ = int64_t(std::count_if(inflight_.begin(), inflight_.end(), [](const auto& w) { return !w.empty(); }));
  // Let MPI move the later buckets now (a non-blocking collective progresses inside MPI calls).
  for (size_t n = 0; n < inflight_.size() && pending(); ++n) {
    next_test_ = (next_test_ + 1) % inflight_.size();
    if (!inflight_[next_test_].empty()) {
      for (auto& w : inflight_[next_test_]) w->test();
      break;
    }
  }
}

void ParamGather::wait_all() {
  if (!buckets_.empty()) wait_for(0, buckets_.back().second + 1);
  wait_first();
}

}  // namespace tessel::optim
