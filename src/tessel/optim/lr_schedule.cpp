#include "tessel/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "tessel/core/check.h"

namespace tessel::optim {

void LrSchedule::validate() const {
  TESSEL_CHECK(style == "constant" || style == "linear" || style == "cosine" || style == "wsd",
               "train.lr_decay_style: '{}' is not supported (allowed: constant, linear, cosine, wsd)", style);
  TESSEL_CHECK(lr >= 0 && min_lr >= 0 && min_lr <= lr, "train.min_lr ({}) must be within [0, train.lr ({})]", min_lr,
               lr);
  TESSEL_CHECK(warmup_iters >= 0 && warmup_iters <= total_iters,
               "train.lr_warmup_iters ({}) must be within [0, train.train_iters ({})]", warmup_iters, total_iters);
}

double LrSchedule::at(int64_t iter) const {
  if (warmup_iters > 0 && iter < warmup_iters) return lr * double(iter + 1) / double(warmup_iters);
  if (style == "constant") return lr;
  const int64_t decay_len = std::max<int64_t>(1, total_iters - warmup_iters);
  const double t = std::clamp(double(iter - warmup_iters) / double(decay_len), 0.0, 1.0);
  if (style == "linear") return min_lr + (lr - min_lr) * (1.0 - t);
  if (style == "cosine") return min_lr + (lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * t));
  // wsd: stable at lr, then linear to min_lr over the final wsd_decay_iters.
  const int64_t decay_start = total_iters - std::max<int64_t>(1, wsd_decay_iters);
  if (iter < decay_start) return lr;
  const double u = std::clamp(double(iter - decay_start) / double(std::max<int64_t>(1, wsd_decay_iters)), 0.0, 1.0);
  return min_lr + (lr - min_lr) * (1.0 - u);
}

}  // namespace tessel::optim
