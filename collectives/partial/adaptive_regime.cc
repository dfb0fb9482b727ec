#include "collectives/partial/adaptive_regime.h"

#include <algorithm>

namespace eagercomm::detail {

void AdaptiveRegime::Measure::clear() {
  max_sum = 0;
  steps = 0;
  std::fill(sum.begin(), sum.end(), 0.0);
  std::fill(n.begin(), n.end(), uint64_t{0});
}

AdaptiveRegime::AdaptiveRegime(int size, uint64_t window, double solo_speedup)
    : size_(std::max(size, 1)),
      window_(std::max<uint64_t>(window, 1)),
      solo_speedup_(solo_speedup) {
  for (Measure* m : {&previous_, &current_}) {
    m->sum.assign(static_cast<size_t>(size_), 0.0);
    m->n.assign(static_cast<size_t>(size_), 0);
  }
  posts_.assign(static_cast<size_t>(size_), 0);
}

void AdaptiveRegime::record(int rank, double compute, bool measured) {
  const uint64_t step = posts_[rank]++;
  if (step < first_step_) return;  // given up on (kMaxPendingSteps)
  while (steps_.size() <= step - first_step_) {
    if (steps_.size() == kMaxPendingSteps) {
      steps_.pop_front();
      ++first_step_;
    } else {
      steps_.emplace_back();
    }
  }
  Step& s = steps_[step - first_step_];
  s.max = std::max(s.max, compute);
  s.measured &= measured;
  ++s.seen;
  // Steps complete in order only as far as every rank got: count the finished prefix.
  while (!steps_.empty() && steps_.front().seen >= size_) {
    if (steps_.front().measured) {
      current_.max_sum += steps_.front().max;
      ++current_.steps;
    }
    steps_.pop_front();
    ++first_step_;
  }
}

void AdaptiveRegime::observe(uint64_t round, std::span<const RankMeta> metas) {
  if (round != next_) return;
  ++next_;
  const size_t ranks = std::min(metas.size(), static_cast<size_t>(size_));
  for (size_t p = 0; p < ranks; ++p) {
    const RankMeta& m = metas[p];
    if (m.posts <= 0) continue;
    const int measured = std::min(m.measured, m.posts);
    // Posts not measured (the first after a flush) come first. Several posts in one round are
    // a late rank catching up: its slow step, then quick ones that found results waiting, so
    // the oldest measured post gets the whole compute (shared evenly, it would hide the slow
    // step from the synchronous estimate).
    const int unmeasured = m.posts - measured;
    for (int k = 0; k < m.posts; ++k) {
      record(static_cast<int>(p), k == unmeasured ? static_cast<double>(m.compute_us) : 0.0,
             k >= unmeasured);
    }
    if (measured > 0) {
      current_.sum[p] += static_cast<double>(m.compute_us);
      current_.n[p] += static_cast<uint64_t>(measured);
    }
  }
  if ((round + 1) % window_ == 0) {
    decide(round / window_ + 2);
    std::swap(previous_, current_);
    current_.clear();
  }
}

void AdaptiveRegime::decide(uint64_t decided_window) {
  const uint64_t steps = previous_.steps + current_.steps;
  bool solo = false;
  if (steps > 0) {
    const double sync_step = (previous_.max_sum + current_.max_sum) / static_cast<double>(steps);
    double solo_step = 0;
    for (int p = 0; p < size_; ++p) {
      const uint64_t n = previous_.n[p] + current_.n[p];
      if (n > 0) solo_step = std::max(solo_step, (previous_.sum[p] + current_.sum[p]) / n);
    }
    predicted_ = solo_step > 0 ? sync_step / solo_step : 1.0;
    solo = predicted_ >= solo_speedup_;
  }
  const size_t slot = decided_window % kKept;
  decided_window_[slot] = decided_window;
  decided_solo_[slot] = solo;
  any_decided_ = true;
  latest_window_ = decided_window;
  latest_solo_ = solo;
}

bool AdaptiveRegime::solo(uint64_t round) const {
  if (!any_decided_) return false;
  const uint64_t w = round / window_;
  if (w >= latest_window_) return latest_solo_;
  const size_t slot = w % kKept;
  // Windows 0 and 1 are never decided (nothing was measured before them): synchronous.
  return decided_window_[slot] == w && decided_solo_[slot];
}

}  // namespace eagercomm::detail
