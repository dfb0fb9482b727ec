// Time-to-accuracy metrics of eagercomm-train, over accuracy-against-time curves and over the
// runs of several seeds. Pure functions, no torch: tests/sgd/train_metrics_test.cc covers them.
#pragma once

#include <cstddef>
#include <optional>
#include <span>

namespace eagercomm::sgd {

// One evaluation of a run: training wall-clock time so far and test accuracy then.
struct CurvePoint {
  double seconds = 0;
  double accuracy = 0;
};

// The first time `curve` (ascending in time) reaches `target`, interpolated linearly between the
// evaluations on either side of the crossing: accuracy is only measured at evaluations, and the
// next evaluation's time alone would charge a run for the evaluation spacing. Empty when no
// evaluation reaches `target` (or the curve is empty, or `target` is NaN).
std::optional<double> time_to_accuracy(std::span<const CurvePoint> curve, double target);

// The accuracy at time `seconds`, interpolated linearly between evaluations. Beyond the last
// evaluation it stays at the last accuracy (a run that finished earlier keeps its final model);
// before the first one it is the first accuracy. Empty for an empty curve.
std::optional<double> accuracy_at(std::span<const CurvePoint> curve, double seconds);

// `reference / time`, how many times faster `time` is than `reference`: empty when either is
// missing or `time` is not positive (unless both are equal: a run is 1x itself by definition).
std::optional<double> speedup(std::optional<double> reference, std::optional<double> time);

// A value over several seeds, some of which may have none (a run that never reached the target).
struct Spread {
  size_t count = 0;    // entries, with or without a value
  size_t missing = 0;  // entries without a value (empty or not finite)
  // Over the entries with a value: empty when there is none.
  std::optional<double> mean, min, max;
  // The sample standard deviation (n - 1): empty with fewer than two values.
  std::optional<double> stddev;
  size_t reached() const { return count - missing; }
};
Spread spread(std::span<const std::optional<double>> values);

}  // namespace eagercomm::sgd
