#include "tessel/optim/grad_reducer.h"

#include <utility>

#include "tessel/core/profiler.h"

namespace tessel::optim {

GradReducer::GradReducer(comm::Communicator& dp, Tensor grads, int64_t bucket_elems)
    : dp_(dp), grads_(std::move(grads)), bucket_elems_(bucket_elems) {
  TESSEL_CHECK(grads_.dtype() == DType::f32 && grads_.dim() == 1, "GradReducer: gradients must be a flat f32 buffer, got {}",
               grads_.str());
}

void GradReducer::launch() {
  if (hi_ > lo_) {
    TESSEL_CHECK(lo_ >= 0 && hi_ <= grads_.numel(), "GradReducer: range [{}, {}) outside the {} gradients", lo_, hi_,
                 grads_.numel());
    inflight_.push_back(
        dp_.all_reduce_async(grads_.slice(0, lo_, hi_).device_ptr(), hi_ - lo_, DType::f32, comm::ReduceOp::sum));
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
