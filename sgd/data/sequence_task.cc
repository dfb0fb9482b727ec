#include "sgd/data/sequence_task.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "sgd/data/random.h"
#include "sgd/sgd_log.h"

namespace eagercomm::sgd {
namespace {

// Stream tags: the length has a stream of its own so length() need not replay the features.
constexpr uint64_t kLengthStream = 0;
constexpr uint64_t kSampleStream = 1;
constexpr uint64_t kPatternStream = 2;

}  // namespace

SequenceTask::SequenceTask(SequenceTaskOptions options) : options_(std::move(options)) {
  const size_t dim = options_.dim;
  // Signed axes, in a seed-dependent order: orthogonal or opposite, so any two classes are
  // at least sqrt(2) * signal apart per step however small dim is.
  std::vector<size_t> axes(2 * dim);
  std::iota(axes.begin(), axes.end(), size_t{0});
  detail::SplitMix64 rng(detail::mix_seed(options_.seed, kPatternStream));
  for (size_t i = axes.size(); i > 1; --i) {
    std::swap(axes[i - 1], axes[detail::uniform_below(rng, i)]);
  }
  patterns_.assign(static_cast<size_t>(options_.classes) * dim, 0.0f);
  for (int c = 0; c < options_.classes; ++c) {
    const size_t axis = axes[static_cast<size_t>(c)];
    patterns_[static_cast<size_t>(c) * dim + axis / 2] = axis % 2 == 0 ? 1.0f : -1.0f;
  }
}

size_t SequenceTask::length(uint64_t index) const {
  detail::SplitMix64 rng(detail::mix_seed(options_.seed, index, kLengthStream));
  const double z = detail::standard_normal(rng);
  // Clamped in double: exp() of a large z may be inf, which no integer type holds.
  const double len =
      std::clamp(std::round(options_.median_len * std::exp(options_.length_sigma * z)),
                 static_cast<double>(options_.min_len), static_cast<double>(options_.max_len));
  return static_cast<size_t>(len);
}

SequenceSample SequenceTask::sample(uint64_t index) const {
  SequenceSample s;
  s.length = length(index);
  detail::SplitMix64 rng(detail::mix_seed(options_.seed, index, kSampleStream));
  s.label =
      static_cast<int64_t>(detail::uniform_below(rng, static_cast<uint64_t>(options_.classes)));
  const std::span<const float> p = pattern(static_cast<int>(s.label));
  const float signal = static_cast<float>(options_.signal);
  s.features.resize(s.length * options_.dim);
  for (size_t t = 0; t < s.length; ++t) {
    float* step = s.features.data() + t * options_.dim;
    for (size_t d = 0; d < options_.dim; ++d) {
      step[d] = signal * p[d] + static_cast<float>(detail::standard_normal(rng));
    }
  }
  return s;
}

uint64_t SequenceTask::total_steps(std::span<const size_t> indices) const {
  uint64_t steps = 0;
  for (size_t i : indices) steps += length(i);
  return steps;
}

std::span<const float> SequenceTask::pattern(int c) const {
  return std::span<const float>(patterns_).subspan(static_cast<size_t>(c) * options_.dim,
                                                   options_.dim);
}

Result<SequenceTask> make_sequence_task(SequenceTaskOptions o) {
  const auto bad = [](const char* what) {
    return make_status(StatusCode::kInvalidArgument, "sequence task: %s", what);
  };
  if (o.min_len < 1) return bad("min_len must be >= 1");
  if (o.max_len < o.min_len) {
    return make_status(StatusCode::kInvalidArgument,
                       "sequence task: max_len %zu must be >= min_len %zu", o.max_len, o.min_len);
  }
  if (o.max_len > kSequenceMaxLen) {
    return make_status(StatusCode::kInvalidArgument, "sequence task: max_len %zu exceeds %zu",
                       o.max_len, kSequenceMaxLen);
  }
  if (o.dim < 1 || o.dim > kSequenceMaxDim) {
    return make_status(StatusCode::kInvalidArgument, "sequence task: dim %zu must be in [1, %zu]",
                       o.dim, kSequenceMaxDim);
  }
  if (o.classes < 2 || static_cast<size_t>(o.classes) > 2 * o.dim) {
    return make_status(StatusCode::kInvalidArgument,
                       "sequence task: classes %d must be in [2, 2 * dim = %zu] (each class "
                       "needs a distinct signed axis of the feature space)",
                       o.classes, 2 * o.dim);
  }
  if (!std::isfinite(o.median_len) || o.median_len <= 0) return bad("median_len must be > 0");
  if (!std::isfinite(o.length_sigma) || o.length_sigma < 0) {
    return bad("length_sigma must be >= 0");
  }
  if (!std::isfinite(o.signal) || o.signal <= 0) {
    return bad("signal must be > 0 (with no signal the labels cannot be learned)");
  }
  EC_DEBUG(kSgd,
           "sequence task: lengths %zu..%zu (median %.1f, sigma %.2f), dim %zu, %d classes, "
           "signal %.2f, seed %llu",
           o.min_len, o.max_len, o.median_len, o.length_sigma, o.dim, o.classes, o.signal,
           static_cast<unsigned long long>(o.seed));
  return SequenceTask(std::move(o));
}

}  // namespace eagercomm::sgd
