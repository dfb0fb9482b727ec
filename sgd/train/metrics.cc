#include "sgd/train/metrics.h"

#include <algorithm>
#include <cmath>

namespace eagercomm::sgd {

std::optional<double> time_to_accuracy(std::span<const CurvePoint> curve, double target) {
  for (size_t i = 0; i < curve.size(); ++i) {
    if (!(curve[i].accuracy >= target)) continue;  // NaN never reaches anything
    if (i == 0) return curve[0].seconds;
    const CurvePoint& a = curve[i - 1];
    const CurvePoint& b = curve[i];
    // a.accuracy < target <= b.accuracy: the denominator is positive.
    const double f = (target - a.accuracy) / (b.accuracy - a.accuracy);
    return a.seconds + f * (b.seconds - a.seconds);
  }
  return std::nullopt;
}

std::optional<double> accuracy_at(std::span<const CurvePoint> curve, double seconds) {
  if (curve.empty()) return std::nullopt;
  if (!(seconds > curve.front().seconds)) return curve.front().accuracy;
  for (size_t i = 1; i < curve.size(); ++i) {
    const CurvePoint& a = curve[i - 1];
    const CurvePoint& b = curve[i];
    if (seconds > b.seconds) continue;
    if (b.seconds <= a.seconds) return b.accuracy;  // two evaluations at the same time
    const double f = (seconds - a.seconds) / (b.seconds - a.seconds);
    return a.accuracy + f * (b.accuracy - a.accuracy);
  }
  return curve.back().accuracy;
}

std::optional<double> speedup(std::optional<double> reference, std::optional<double> time) {
  if (!reference || !time) return std::nullopt;
  if (*reference == *time) return 1.0;
  if (!(*time > 0) || !std::isfinite(*reference / *time)) return std::nullopt;
  return *reference / *time;
}

Spread spread(std::span<const std::optional<double>> values) {
  Spread s;
  s.count = values.size();
  double sum = 0;
  size_t n = 0;
  for (const std::optional<double>& v : values) {
    if (!v || !std::isfinite(*v)) {
      ++s.missing;
      continue;
    }
    sum += *v;
    ++n;
    s.min = s.min ? std::min(*s.min, *v) : *v;
    s.max = s.max ? std::max(*s.max, *v) : *v;
  }
  if (n == 0) return s;
  const double mean = sum / static_cast<double>(n);
  s.mean = mean;
  if (n >= 2) {
    double squares = 0;
    for (const std::optional<double>& v : values) {
      if (v && std::isfinite(*v)) squares += (*v - mean) * (*v - mean);
    }
    s.stddev = std::sqrt(squares / static_cast<double>(n - 1));
  }
  return s;
}

}  // namespace eagercomm::sgd
