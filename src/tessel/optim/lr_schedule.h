#pragma once
// Learning-rate schedules as Megatron-LM defines them: linear warm-up from 0 over lr_warmup_iters,
// then decay to min_lr over the remaining iterations: constant, linear, cosine, or WSD
// (warmup-stable-decay: constant, then a linear cool-down over the last wsd_decay_iters).
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
