#include "tessel/resilience/detectors.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace tessel::resilience {

const char* detector_name(Detector d) {
  switch (d) {
    case Detector::none: return "none";
    case Detector::loss_spike: return "loss_spike";
    case Detector::grad_norm_spike: return "grad_norm_spike";
    case Detector::nonfinite: return "nonfinite";
  }
  return "?";
}

std::string Anomaly::describe() const {
  switch (detector) {
    case Detector::nonfinite: return fmt::format("a non-finite loss or gradient norm ({})", value);
    case Detector::loss_spike: return fmt::format("loss {:.6g} is a spike (threshold {:.6g})", value, threshold);
    case Detector::grad_norm_spike:
      return fmt::format("gradient norm {:.6g} is a spike (threshold {:.6g})", value, threshold);
    case Detector::none: break;
  }
  return "no anomaly";
}

void Window::add(double v) {
  values_.push_back(v);
  if (values_.size() > size_) values_.pop_front();
}

double Window::mean() const {
  double s = 0;
  for (double v : values_) s += v;
  return values_.empty() ? 0.0 : s / double(values_.size());
}

double Window::stddev() const {
  if (values_.empty()) return 0;
  const double m = mean();
  double s = 0;
  for (double v : values_) s += (v - m) * (v - m);
  return std::sqrt(s / double(values_.size()));
}

AnomalyDetectors::AnomalyDetectors(const train::ResilienceConfig& cfg)
    : cfg_(cfg), loss_(size_t(cfg.spike_window)), grad_norm_(size_t(cfg.spike_window)) {}

std::optional<double> AnomalyDetectors::spike_threshold(const Window& w, double zscore) const {
  if (zscore <= 0 || !w.full()) return std::nullopt;
  // A floor under the deviation: over a window of equal values any rounding difference would be an
  // infinite z-score. 1e-3 of the mean is far below a real spike and far above rounding.
  const double sd = std::max(w.stddev(), 1e-3 * std::abs(w.mean()) + 1e-12);
  return w.mean() + zscore * sd;
}

std::optional<Anomaly> AnomalyDetectors::check(double loss, double grad_norm) const {
  if (cfg_.detect_nonfinite) {
    if (!std::isfinite(loss)) return Anomaly{Detector::nonfinite, loss, 0};
    if (!std::isfinite(grad_norm)) return Anomaly{Detector::nonfinite, grad_norm, 0};
  }
  if (const auto t = spike_threshold(loss_, cfg_.loss_spike_zscore); t && loss > *t)
    return Anomaly{Detector::loss_spike, loss, *t};
  if (const auto t = spike_threshold(grad_norm_, cfg_.grad_norm_spike_zscore); t && grad_norm > *t)
    return Anomaly{Detector::grad_norm_spike, grad_norm, *t};
  return std::nullopt;
}

void AnomalyDetectors::restore(const std::vector<double>& losses, const std::vector<double>& grad_norms) {
  loss_ = Window(loss_.capacity());
  grad_norm_ = Window(grad_norm_.capacity());
  for (const double v : losses) loss_.add(v);
  for (const double v : grad_norms) grad_norm_.add(v);
}

void AnomalyDetectors::accept(double loss, double grad_norm) {
  if (!std::isfinite(loss) || !std::isfinite(grad_norm)) return;  // detect_nonfinite off: keep the windows finite
  loss_.add(loss);
  grad_norm_.add(grad_norm);
}

}  // namespace tessel::resilience
