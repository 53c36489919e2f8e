#include "tessel/optim/grad_reducer.h"

#include <algorithm>
#include <utility>

#include "tessel/core/profiler.h"

namespace tessel::optim {

GradReducer::GradReducer(Tensor grads, int64_t bucket_elems, std::vector<Unit> units)
    : grads_(std::move(grads)), bucket_elems_(bucket_elems) {
  TESSEL_CHECK(grads_.dtype() == DType::f32 && grads_.dim() == 1, "GradReducer: gradients must be a flat f32 buffer, got {}",
               grads_.str());
  int64_t at = 0;
  for (Unit& u : units) {
    TESSEL_CHECK(u.begin == at && u.end >= u.begin, "GradReducer: units must tile the gradients in order; [{}, {}) after {}",
                 u.begin, u.end, at);
    at = u.end;
    if (!u.group) continue;
    Reduced r{u.group, u.begin, u.end, {}};
    if (!u.owner_counts.empty()) {
      TESSEL_CHECK(int(u.owner_counts.size()) == u.group->size(), "GradReducer: {} shard counts for {} ranks",
                   u.owner_counts.size(), u.group->size());
      r.owner_begin.push_back(u.begin);
      for (int64_t c : u.owner_counts) r.owner_begin.push_back(r.owner_begin.back() + c);
      TESSEL_CHECK(r.owner_begin.back() == u.end, "GradReducer: shards of {} elements over a unit of {}",
                   r.owner_begin.back() - u.begin, u.end - u.begin);
    }
    units_.push_back(std::move(r));
  }
  TESSEL_CHECK(at == grads_.numel(), "GradReducer: units cover {} of the {} gradients", at, grads_.numel());
}

GradReducer::GradReducer(comm::Communicator& dp, Tensor grads, int64_t bucket_elems, std::vector<int64_t> owner_counts)
    : GradReducer(grads, bucket_elems, {{&dp, 0, grads.numel(), std::move(owner_counts)}}) {}

void GradReducer::launch() {
  if (hi_ > lo_) {
    TESSEL_CHECK(lo_ >= 0 && hi_ <= grads_.numel(), "GradReducer: range [{}, {}) outside the {} gradients", lo_, hi_,
                 grads_.numel());
    // One collective per at most 2^30 elements (MPI counts are int): a single parameter's range
    // (an embedding table) may be larger than any bucket.
    constexpr int64_t kMaxCall = int64_t(1) << 30;
    const auto each_call = [&](int64_t b, int64_t e, auto&& launch_one) {
      for (int64_t c = b; c < e; c += kMaxCall) launch_one(c, std::min(e, c + kMaxCall));
    };
    const comm::OverlappedCommScope behind_backward;
    for (const Reduced& u : units_) {
      const int64_t lo = std::max(lo_, u.begin), hi = std::min(hi_, u.end);  // the bucket's part in this unit
      if (lo >= hi) continue;
      if (u.owner_begin.empty()) {
        each_call(lo, hi, [&](int64_t b, int64_t e) {
          inflight_.push_back(
              u.group->all_reduce_async(grads_.slice(0, b, e).device_ptr(), e - b, DType::f32, comm::ReduceOp::sum));
        });
        continue;
      }
      for (int r = 0; r + 1 < int(u.owner_begin.size()); ++r) {  // the part rank r owns
        const int64_t b = std::max(lo, u.owner_begin[size_t(r)]), e = std::min(hi, u.owner_begin[size_t(r) + 1]);
        each_call(b, e, [&](int64_t cb, int64_t ce) {
          inflight_.push_back(
              u.group->reduce_async(grads_.slice(0, cb, ce).device_ptr(), ce - cb, DType::f32, comm::ReduceOp::sum, r));
        });
      }
    }
    ++launched_;
  }
  lo_ = hi_ = -1;
}

void GradReducer::ready(int64_t begin, int64_t end) {
  if (end <= begin) return;
  if (lo_ >= 0 && end != lo_) launch();  // not adjacent to the bucket being filled
  if (lo_ < 0) hi_ = end;
  lo_ = begin;
  if (hi_ - lo_ >= bucket_elems_) launch();
  for (auto& w : inflight_) w->test();  // MPI progresses the in-flight all-reduces only when called
}

void GradReducer::finish() {
  launch();
  ProfileScope prof("dp_grad_wait");
  for (auto& w : inflight_) w->wait();
  inflight_.clear();
}

}  // namespace tessel::optim
