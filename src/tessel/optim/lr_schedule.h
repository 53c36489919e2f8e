#pragma once
// Learning-rate schedules as Megatron-LM defines them: linear warm-up from 0 at step 0 to lr at step
// lr_warmup_iters, then decay to min_lr at step total_iters: constant, linear, cosine, or WSD
// (warmup-stable-decay: constant, then a linear cool-down over the last wsd_decay_iters); min_lr
// after total_iters. A warm-up longer than the run keeps every step on the ramp.
#include <cstdint>
#include <string>

namespace tessel::optim {

struct LrSchedule {
  double lr = 3e-4, min_lr = 0.0;
  int64_t warmup_iters = 0, total_iters = 1;
  std::string style = "cosine";  // constant | linear | cosine | wsd
  int64_t wsd_decay_iters = 0;
  double at(int64_t iter) const;  // iter is 0-based: the step about to be taken
  void validate() const;
};

}  // namespace tessel::optim
