// eagercomm-train's time-to-accuracy metrics (sgd/train/metrics.h): interpolation, runs that
// never reach the target, clamping past a curve's end, and the spread over seeds. Compiled into
// eager_sgd_test (tests/sgd/CMakeLists.txt), so that it also runs without LibTorch.
#include "sgd/train/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace eagercomm::sgd {
namespace {

const std::vector<CurvePoint> kCurve = {{0, 0.10}, {10, 0.50}, {20, 0.70}, {30, 0.60}, {40, 0.80}};

TEST(TrainMetrics, TimeToAccuracyInterpolatesInsideTheCrossingSegment) {
  // 0.60 lies 1/2 of the way from 0.50 (10 s) to 0.70 (20 s).
  ASSERT_TRUE(time_to_accuracy(kCurve, 0.60).has_value());
  EXPECT_DOUBLE_EQ(*time_to_accuracy(kCurve, 0.60), 15.0);
  EXPECT_DOUBLE_EQ(*time_to_accuracy(kCurve, 0.20), 2.5);
  // Exactly an evaluation's accuracy: that evaluation's time.
  EXPECT_DOUBLE_EQ(*time_to_accuracy(kCurve, 0.70), 20.0);
  // The first crossing counts, not a later one after a dip (0.65 is crossed at 17.5 s, again
  // between 30 and 40 s).
  EXPECT_DOUBLE_EQ(*time_to_accuracy(kCurve, 0.65), 17.5);
  // 0.75 only after the dip: between 30 s (0.60) and 40 s (0.80).
  EXPECT_DOUBLE_EQ(*time_to_accuracy(kCurve, 0.75), 37.5);
  // Reached at the first point already.
  EXPECT_DOUBLE_EQ(*time_to_accuracy(kCurve, 0.05), 0.0);
}

TEST(TrainMetrics, TimeToAccuracyIsEmptyWhenNeverReached) {
  EXPECT_FALSE(time_to_accuracy(kCurve, 0.81).has_value());
  EXPECT_FALSE(time_to_accuracy({}, 0.1).has_value());
  EXPECT_FALSE(time_to_accuracy(kCurve, std::nan("")).has_value());
  // The final point reaches a target equal to its accuracy (sync against its own final one).
  EXPECT_DOUBLE_EQ(*time_to_accuracy(kCurve, kCurve.back().accuracy), 40.0);
}

TEST(TrainMetrics, AccuracyAtInterpolatesAndClampsPastTheEnd) {
  EXPECT_DOUBLE_EQ(*accuracy_at(kCurve, 5), 0.30);
  EXPECT_DOUBLE_EQ(*accuracy_at(kCurve, 25), 0.65);
  EXPECT_DOUBLE_EQ(*accuracy_at(kCurve, 20), 0.70);
  EXPECT_DOUBLE_EQ(*accuracy_at(kCurve, 0), 0.10);
  // A finished run keeps its final model.
  EXPECT_DOUBLE_EQ(*accuracy_at(kCurve, 40), 0.80);
  EXPECT_DOUBLE_EQ(*accuracy_at(kCurve, 1e9), 0.80);
  // Before the first evaluation: the first accuracy.
  EXPECT_DOUBLE_EQ(*accuracy_at(kCurve, -1), 0.10);
  EXPECT_FALSE(accuracy_at({}, 1).has_value());
  // Two evaluations at the same time: no division by zero, the later one counts past it.
  const std::vector<CurvePoint> twice = {{0, 0.1}, {5, 0.2}, {5, 0.4}, {10, 0.6}};
  EXPECT_DOUBLE_EQ(*accuracy_at(twice, 5), 0.2);
  EXPECT_DOUBLE_EQ(*accuracy_at(twice, 7.5), 0.5);
}

TEST(TrainMetrics, SpeedupIsTheRatioAndEmptyWithoutATime) {
  EXPECT_DOUBLE_EQ(*speedup(30.0, 20.0), 1.5);
  EXPECT_DOUBLE_EQ(*speedup(0.0, 0.0), 1.0);
  EXPECT_FALSE(speedup(30.0, std::nullopt).has_value());
  EXPECT_FALSE(speedup(std::nullopt, 20.0).has_value());
  EXPECT_FALSE(speedup(30.0, 0.0).has_value());
}

TEST(TrainMetrics, SpreadCountsNotReachedEntriesApart) {
  const std::vector<std::optional<double>> values = {2.0, std::nullopt, 4.0, 9.0, std::nullopt};
  const Spread s = spread(values);
  EXPECT_EQ(s.count, 5u);
  EXPECT_EQ(s.missing, 2u);
  EXPECT_EQ(s.reached(), 3u);
  ASSERT_TRUE(s.mean && s.min && s.max && s.stddev);
  EXPECT_DOUBLE_EQ(*s.mean, 5.0);
  EXPECT_DOUBLE_EQ(*s.min, 2.0);
  EXPECT_DOUBLE_EQ(*s.max, 9.0);
  // Sample deviation: squares 9 + 1 + 16 = 26 over n - 1 = 2.
  EXPECT_DOUBLE_EQ(*s.stddev, std::sqrt(13.0));
}

TEST(TrainMetrics, SpreadOfOneValueIsThatValueAndOfNoneIsEmpty) {
  const std::vector<std::optional<double>> one = {std::nullopt, 0.75};
  const Spread s = spread(one);
  EXPECT_EQ(s.missing, 1u);
  EXPECT_DOUBLE_EQ(*s.mean, 0.75);
  EXPECT_DOUBLE_EQ(*s.min, 0.75);
  EXPECT_DOUBLE_EQ(*s.max, 0.75);
  EXPECT_FALSE(s.stddev.has_value());

  const std::vector<std::optional<double>> none = {std::nullopt,
                                                   std::numeric_limits<double>::quiet_NaN()};
  const Spread n = spread(none);
  EXPECT_EQ(n.count, 2u);
  EXPECT_EQ(n.missing, 2u);
  EXPECT_FALSE(n.mean || n.min || n.max || n.stddev);
  EXPECT_EQ(spread({}).count, 0u);
}

}  // namespace
}  // namespace eagercomm::sgd
