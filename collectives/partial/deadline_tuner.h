// Internal: deadline(auto)'s T, from the arrival spread the rounds' coordinators measure. Not
// installed.
//
// The coordinator of round r notes when each rank's fresh post for r reached it; when r
// activates it knows how long after the first the m-th rank arrived, m = covered(P): all but
// the last tenth of the ranks, at least one rank left out and at least two counted (P = 4: the
// third; P = 64: the 58th; P = 2: both). When the round went before m ranks had come, it reports
// how long it waited (a lower bound). It writes that spread into the round's metadata (its own
// slot of the compute section, partial_meta.h), so every rank receives every round's spread and
// computes the same T: twice the median spread over the last kWindow rounds, at least
// kMinDeadline. A persistent straggler (fewer than a tenth of the ranks) arrives after the m-th
// and does not move T; an occasional one is outvoted by the median over rounds; ordinary noise
// is covered twice over, so ordinary rounds wait for everybody. A T that cuts rounds off before
// m ranks arrived doubles (those rounds report at least T). Until kWindow rounds were measured
// there is no T: rounds wait for every rank, as adaptive rounds start synchronous.
//
// Why m and not the median rank (the first version): with 4 ranks on 2 cores the third and
// fourth arrivals trail the second by much more than the second trails the first, and T = 2 x
// the median's spread left 40% of the contributions out of rounds without any imbalance
// (sgd/EXPERIMENTS.md, 2026-12-07). Why the coordinators' clocks and not the compute times
// adaptive rounds carry: those are the time outside this object's calls, which for an
// application that polls for results (rather than waiting in wait()) includes the wait itself;
// in the simulation every rank then measured the same ~11 steps and T covered the straggler.
// Driver only.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

namespace eagercomm::detail {

class DeadlineTuner {
 public:
  static constexpr size_t kWindow = 16;
  static constexpr std::chrono::microseconds kMinDeadline{50};

  // A delivered round's spread (its coordinator's measure), in microseconds.
  void observe(uint32_t spread_us);
  // The coordinator's measure: `arrivals_ns`, the times its fresh posts arrived (sorted or not;
  // reordered), of `ranks`; `now_ns` when the round activated.
  static uint32_t spread_us(std::vector<int64_t>& arrivals_ns, int ranks, int64_t now_ns);
  // The arrival whose lateness T is to cover, counted from 1: all but a tenth of `ranks`.
  static int covered(int ranks);
  // T in force, or none while fewer than kWindow rounds were measured.
  std::optional<std::chrono::microseconds> deadline() const { return deadline_; }

 private:
  std::vector<uint32_t> spreads_;  // the last kWindow spreads, in us (a ring)
  size_t next_ = 0;
  std::vector<uint32_t> scratch_;
  std::optional<std::chrono::microseconds> deadline_;
};

}  // namespace eagercomm::detail
