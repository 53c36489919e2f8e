#include "tessel/optim/grad_reducer.h"

#include <algorithm>
#include <utility>

#include "tessel/core/profiler.h"

namespace tessel::optim {

GradReducer::GradReducer(comm::Communicator& dp, Tensor grads, int64_t bucket_elems, std::vector<int64_t> owner_counts)
    : dp_(dp), grads_(std::move(grads)), bucket_elems_(bucket_elems) {
  TESSEL_CHECK(grads_.dtype() == DType::f32 && grads_.dim() == 1, "GradReducer: gradients must be a flat f32 buffer, got {}",
               grads_.str());
  if (owner_counts.empty()) return;
  TESSEL_CHECK(int(owner_counts.size()) == dp_.size(), "GradReducer: {} shard counts for {} ranks", owner_counts.size(),
               dp_.size());
  owner_begin_.push_back(0);
  for (int64_t c : owner_counts) owner_begin_.push_back(owner_begin_.back() + c);
  TESSEL_CHECK(owner_begin_.back() == grads_.numel(), "GradReducer: shards of {} elements over {} gradients",
               owner_begin_.back(), grads_.numel());
}

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
    if (owner_begin_.empty()) {
      each_call(lo_, hi_, [&](int64_t b, int64_t e) {
        inflight_.push_back(
            dp_.all_reduce_async(grads_.slice(0, b, e).device_ptr(), e - b, DType::f32, comm::ReduceOp::sum));
      });
    } else {
      for (int r = 0; r + 1 < int(owner_begin_.size()); ++r) {  // the part of the bucket rank r owns
        const int64_t b = std::max(lo_, owner_begin_[size_t(r)]), e = std::min(hi_, owner_begin_[size_t(r) + 1]);
        each_call(b, e, [&](int64_t cb, int64_t ce) {
          inflight_.push_back(
              dp_.reduce_async(grads_.slice(0, cb, ce).device_ptr(), ce - cb, DType::f32, comm::ReduceOp::sum, r));
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
