#include "tessel/optim/param_gather.h"

#include <algorithm>

#include "tessel/core/check.h"
#include "tessel/core/profiler.h"

namespace tessel::optim {

ParamGather::ParamGather(comm::Communicator& shard, std::vector<int64_t> owner_counts,
                         std::vector<std::pair<int64_t, int64_t>> buckets)
    : shard_(shard), buckets_(std::move(buckets)) {
  TESSEL_CHECK(int(owner_counts.size()) == shard_.size(), "ParamGather: {} owner counts for {} ranks",
               owner_counts.size(), shard_.size());
  owner_begin_.push_back(0);
  for (int64_t c : owner_counts) owner_begin_.push_back(owner_begin_.back() + c);
  int64_t at = 0;
  for (const auto& [b, e] : buckets_) {
    TESSEL_CHECK(b == at && e >= b, "ParamGather: buckets must tile the flat range in order; [{}, {}) after {}", b, e,
                 at);
    at = e;
  }
  TESSEL_CHECK(at == owner_begin_.back(), "ParamGather: buckets cover {} elements, the shards {}", at,
               owner_begin_.back());
}

ParamGather::~ParamGather() {
  try {
    wait_all();
  } catch (...) {  // a failing wait while unwinding: the job is going down anyway
  }
}

void ParamGather::launch(const Tensor& flat, std::vector<std::unique_ptr<comm::Work>> first) {
  TESSEL_CHECK(!pending(), "ParamGather: launch while the previous gather is still in flight");
  TESSEL_CHECK(flat.numel() == owner_begin_.back(), "ParamGather: a buffer of {} elements for shards of {}",
               flat.numel(), owner_begin_.back());
  first_ = std::move(first);
  inflight_.clear();
  const size_t es = dtype_size(flat.dtype());
  char* base = static_cast<char*>(flat.device_ptr());
  const comm::OverlappedCommScope behind_forward;
  for (const auto& [b, e] : buckets_) {
    // Each rank contributes the part of [b, e) its shard holds (possibly none).
    std::vector<int64_t> counts(static_cast<size_t>(shard_.size()));
    for (size_t r = 0; r < counts.size(); ++r)
      counts[r] = std::max<int64_t>(0, std::min(owner_begin_[r + 1], e) - std::max(owner_begin_[r], b));
    inflight_.push_back(e > b ? shard_.all_gather_v_async(base + size_t(b) * es, counts, flat.dtype()) : nullptr);
  }
  pending_ = int64_t(std::count_if(inflight_.begin(), inflight_.end(), [](const auto& w) { return w != nullptr; }));
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
    if (inflight_[i]) {
      inflight_[i]->wait();
      inflight_[i].reset();
    }
  }
  pending_ = int64_t(std::count_if(inflight_.begin(), inflight_.end(), [](const auto& w) { return w != nullptr; }));
  // Let MPI move the later buckets now (a non-blocking collective progresses inside MPI calls).
  for (size_t n = 0; n < inflight_.size() && pending(); ++n) {
    next_test_ = (next_test_ + 1) % inflight_.size();
    if (inflight_[next_test_]) {
      inflight_[next_test_]->test();
      break;
    }
  }
}

void ParamGather::wait_all() {
  if (!buckets_.empty()) wait_for(0, buckets_.back().second + 1);
  wait_first();
}

}  // namespace tessel::optim
