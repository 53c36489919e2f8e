#include "tessel/resilience/rewind.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <bit>
#include <cmath>
#include <nlohmann/json.hpp>

#include "tessel/core/dtype.h"

namespace tessel::resilience {

StepVerdict agree_after_step(comm::Communicator& world, int stop_signal, const std::optional<Anomaly>& mine) {
  StepVerdict v;
  int flags[2] = {stop_signal, mine ? int(mine->detector) : 0};
  world.all_reduce(flags, 2, DType::i32, comm::ReduceOp::max);
  v.stop_signal = flags[0];
  if (flags[1] == 0) return v;
  // Somebody flagged the step: every rank's detector and value (a second, rare collective).
  const int n = world.size();
  // Communicators move no fp64: the value and threshold travel as their bits.
  const int64_t own[3] = {mine ? int64_t(mine->detector) : 0, std::bit_cast<int64_t>(mine ? mine->value : 0.0),
                          std::bit_cast<int64_t>(mine ? mine->threshold : 0.0)};
  std::vector<int64_t> all(size_t(3 * n));
  world.all_gather(own, all.data(), 3, DType::i64);
  Anomaly a;
  a.detector = Detector(flags[1]);
  for (int r = 0; r < n; ++r) {
    const int d = int(all[size_t(3 * r)]);
    if (d != 0) v.ranks.push_back(r);
    if (d == flags[1] && v.first_rank < 0) {
      v.first_rank = r;
      a.value = std::bit_cast<double>(all[size_t(3 * r + 1)]);
      a.threshold = std::bit_cast<double>(all[size_t(3 * r + 2)]);
    }
  }
  v.anomaly = a;
  return v;
}

bool RewindBudget::allow(int64_t iteration) {
  at_.push_back(iteration);
  while (!at_.empty() && at_.front() <= iteration - window_) at_.pop_front();
  return int64_t(at_.size()) <= max_;
}

nlohmann::json RewindEvent::json() const {
  nlohmann::json j = {{"event", "rewind"},
                      {"step", step},
                      {"detector", detector_name(anomaly.detector)},
                      {"ranks", ranks},
                      {"restored_from", restored_from},
                      {"restored_step", restored_step},
                      {"skipped_iterations", {skipped_first, skipped_last}},
                      {"skipped_samples", skipped_samples},
                      {"lr_scale", lr_scale}};
  // JSON has no NaN or infinity: a non-finite value is written as text.
  if (std::isfinite(anomaly.value))
    j["value"] = anomaly.value;
  else
    j["value"] = fmt::format("{}", anomaly.value);
  return j;
}

std::string RewindEvent::line() const {
  return fmt::format("rewind at step {}: {} on rank{} {}; restored step {} from {}, skipping iterations {}-{} ({} samples){}",
                     step, anomaly.describe(), ranks.size() == 1 ? "" : "s", fmt::join(ranks, ","), restored_step,
                     restored_from, skipped_first, skipped_last, skipped_samples,
                     lr_scale != 1 ? fmt::format("; learning rate x {:g} from now on", lr_scale) : std::string());
}

}  // namespace tessel::resilience
