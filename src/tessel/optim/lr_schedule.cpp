#include "tessel/optim/lr_schedule.h"

#include <cmath>

#include "tessel/core/check.h"

namespace tessel::optim {

void LrSchedule::validate() const {
  TESSEL_CHECK(style == "constant" || style == "linear" || style == "cosine" || style == "wsd",
               "train.lr_decay_style: '{}' is not supported (allowed: constant, linear, cosine, wsd)", style);
  TESSEL_CHECK(lr >= 0 && min_lr >= 0 && min_lr <= lr, "train.min_lr ({}) must be within [0, train.lr ({})]", min_lr,
               lr);
  // A warm-up longer than the run is allowed (as in Megatron): every step then stays on the ramp.
  TESSEL_CHECK(warmup_iters >= 0, "train.lr_warmup_iters must be >= 0, got {}", warmup_iters);
  TESSEL_CHECK(wsd_decay_iters >= 0, "train.lr_wsd_decay_iters must be >= 0, got {}", wsd_decay_iters);
}

// Megatron-LM's OptimizerParamScheduler.get_lr with init_lr = 0 and lr_decay_iters = total_iters;
// its num_steps (optimizer steps completed) is `iter`.
double LrSchedule::at(int64_t iter) const {
  if (warmup_iters > 0 && iter <= warmup_iters) return lr * double(iter) / double(warmup_iters);
  if (style == "constant") return lr;
  if (iter > total_iters) return min_lr;
  // Here warmup_iters < iter <= total_iters, so the decay length is positive.
  const double ratio = double(iter - warmup_iters) / double(total_iters - warmup_iters);
  double coeff = 1.0;
  if (style == "linear") {
    coeff = 1.0 - ratio;
  } else if (style == "cosine") {
    coeff = 0.5 * (std::cos(M_PI * ratio) + 1.0);
  } else {  // wsd: stable, then linear to min_lr over the final wsd_decay_iters
    const int64_t anneal_start = total_iters - wsd_decay_iters;
    if (iter > anneal_start) coeff = 1.0 - double(iter - anneal_start) / double(wsd_decay_iters);
  }
  return min_lr + coeff * (lr - min_lr);
}

}  // namespace tessel::optim
