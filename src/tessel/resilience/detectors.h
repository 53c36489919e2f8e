#pragma once
// Anomaly detectors, checked after every optimizer step (docs/resilience.md): a non-finite loss or
// gradient norm, and spikes of either, measured as a z-score against the mean and standard
// deviation of the last `spike_window` accepted steps. Only upward spikes count (a loss that drops
// fast is not a fault). A flagged step never joins the windows: the statistics describe good steps.
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "tessel/train/config.h"

namespace tessel::resilience {

// Detectors by number (agreed across ranks as the largest number any rank flagged; 0: none).
enum class Detector { none = 0, loss_spike = 1, grad_norm_spike = 2, nonfinite = 3 };
const char* detector_name(Detector d);

struct Anomaly {
  Detector detector = Detector::none;
  double value = 0;      // the loss or gradient norm that fired it
  double threshold = 0;  // what it exceeded: the value a z-score of the configured size reaches (nonfinite: 0)
  std::string describe() const;  // "loss 7.81 is a spike: above 4.12 (mean + 6 sd over 20 steps)"
};

// The mean and standard deviation of the last `size` values added (a sliding window).
class Window {
 public:
  explicit Window(size_t size) : size_(size) {}
  void add(double v);
  bool full() const { return values_.size() == size_; }
  size_t count() const { return values_.size(); }
  size_t capacity() const { return size_; }
  double mean() const;
  double stddev() const;  // population deviation
  std::vector<double> values() const { return {values_.begin(), values_.end()}; }  // oldest first
 private:
  size_t size_;
  std::deque<double> values_;
};

class AnomalyDetectors {
 public:
  explicit AnomalyDetectors(const train::ResilienceConfig& cfg);
  // The step's anomaly: the most severe detector that fires (nonfinite before the spikes), or none.
  std::optional<Anomaly> check(double loss, double grad_norm) const;
  // A step every rank accepted: its values join the spike windows.
  void accept(double loss, double grad_norm);
  // The windows' values, oldest first (saved in checkpoints), and their restoration on a restart (a
  // window of another size keeps the newest values that fit).
  std::vector<double> loss_window() const { return loss_.values(); }
  std::vector<double> grad_norm_window() const { return grad_norm_.values(); }
  void restore(const std::vector<double>& losses, const std::vector<double>& grad_norms);

 private:
  // The value above which x is a spike of window w at `zscore` deviations (nullopt: not armed yet).
  std::optional<double> spike_threshold(const Window& w, double zscore) const;
  train::ResilienceConfig cfg_;
  Window loss_, grad_norm_;
};

}  // namespace tessel::resilience
