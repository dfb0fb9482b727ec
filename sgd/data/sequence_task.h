// A synthetic variable-length sequence classification task with inherent load imbalance.
//
// eager-SGD's motivating workload is an LSTM on UCF101 videos whose lengths differ by two
// orders of magnitude, so some ranks' batches cost far more than others'. This task has the
// same shape without the download: sequence lengths are long-tailed (a log-normal clipped to
// [min_len, max_len]), every step is a small feature vector, and the label is a property that
// accumulates over the sequence.
//
// Sample i: its class c is drawn uniformly from [0, classes), independently of its length (so
// the length is no shortcut). Every step is signal * p_c + N(0, I), where p_c is class c's
// unit pattern (a signed axis of the feature space; classes <= 2 * dim keeps them distinct).
// With the default signal 0.5 a single step identifies the class barely better than chance,
// while the mean over the sequence does well: a model has to integrate over time, which an
// LSTM learns readily. Longer sequences carry more evidence and cost more steps.
//
// Everything is a pure function of (seed, index), so ranks generate any sample on their own
// and the same index is the same sample on every rank, host and standard library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/status.h"

namespace eagercomm::sgd {

struct SequenceTaskOptions {
  size_t min_len = 8;       // shortest sequence (>= 1)
  size_t max_len = 512;     // longest sequence (>= min_len, <= kSequenceMaxLen)
  double median_len = 32;   // median of the log-normal before clipping (> 0)
  double length_sigma = 1;  // log-normal shape: larger means a longer tail (>= 0)
  size_t dim = 8;           // features per step (1 ..= kSequenceMaxDim)
  int classes = 4;          // number of classes (2 ..= 2 * dim)
  double signal = 0.5;      // class pattern amplitude per step, in noise standard deviations (> 0)
  uint64_t seed = 1;        // picks the class patterns and every sample
};

inline constexpr size_t kSequenceMaxLen = size_t{1} << 20;
inline constexpr size_t kSequenceMaxDim = 4096;
// Indices from here on are a test set disjoint from any training range [0, 2^40).
inline constexpr uint64_t kSequenceTestIndexBase = uint64_t{1} << 40;

struct SequenceSample {
  size_t length = 0;            // steps
  std::vector<float> features;  // length x dim, step-major
  int64_t label = 0;            // class in [0, classes)
};

class SequenceTask {
 public:
  // Sample `index` (any 64-bit value). Thread-safe.
  SequenceSample sample(uint64_t index) const;
  // The length of sample `index`, without generating its features (cheap).
  size_t length(uint64_t index) const;
  // Total steps of the samples `indices`: the compute cost of that batch for a recurrent model,
  // and what a load-imbalance report compares across ranks.
  uint64_t total_steps(std::span<const size_t> indices) const;

  const SequenceTaskOptions& options() const { return options_; }
  // Class c's unit pattern (dim floats), for diagnostics and tests.
  std::span<const float> pattern(int c) const;

 private:
  friend Result<SequenceTask> make_sequence_task(SequenceTaskOptions options);
  explicit SequenceTask(SequenceTaskOptions options);

  SequenceTaskOptions options_;
  std::vector<float> patterns_;  // classes x dim
};

// Checks `options` and builds the task. kInvalidArgument, naming the option and its bound,
// when min_len < 1, max_len < min_len or > kSequenceMaxLen, dim < 1 or > kSequenceMaxDim,
// classes < 2 or > 2 * dim, median_len <= 0, length_sigma < 0, signal <= 0, or a value is not
// finite.
Result<SequenceTask> make_sequence_task(SequenceTaskOptions options);

}  // namespace eagercomm::sgd
