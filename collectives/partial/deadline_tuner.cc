#include "collectives/partial/deadline_tuner.h"

#include <algorithm>

#include "collectives/partial/partial_meta.h"

namespace eagercomm::detail {

int DeadlineTuner::covered(int ranks) { return std::max(2, ranks - std::max(1, ranks / 10)); }

uint32_t DeadlineTuner::spread_us(std::vector<int64_t>& arrivals_ns, int ranks, int64_t now_ns) {
  if (arrivals_ns.empty()) return 0;
  std::sort(arrivals_ns.begin(), arrivals_ns.end());
  const size_t m = static_cast<size_t>(covered(ranks));  // counted from 1
  const int64_t until = arrivals_ns.size() >= m ? arrivals_ns[m - 1] : now_ns;
  const int64_t us = std::max<int64_t>(until - arrivals_ns.front(), 0) / 1000;
  return static_cast<uint32_t>(std::min<int64_t>(us, RankMeta::kMaxComputeUs));
}

void DeadlineTuner::observe(uint32_t spread_us) {
  if (spreads_.size() < kWindow) {
    spreads_.push_back(spread_us);
  } else {
    spreads_[next_] = spread_us;
  }
  next_ = (next_ + 1) % kWindow;
  if (spreads_.size() < kWindow) return;
  scratch_.assign(spreads_.begin(), spreads_.end());
  const auto m = scratch_.begin() + static_cast<std::ptrdiff_t>((kWindow - 1) / 2);
  std::nth_element(scratch_.begin(), m, scratch_.end());
  deadline_ = std::max(kMinDeadline, std::chrono::microseconds(2 * int64_t{*m}));
}

}  // namespace eagercomm::detail
