// Internal: deadline(auto)'s T, from the arrival spread the rounds' coordinators measure. Not
// installed.
//
// The coordinator of round r notes when each rank's fresh post for r reached it; when r
// activates it knows how long after the first the median rank arrived (or, when the round went
// before half the ranks had, how long it waited: a lower bound). It writes that spread into the
// round's metadata (its own slot of the compute section, partial_meta.h), so every rank receives
// every round's spread and computes the same T: twice the median spread over the last kWindow
// rounds, at least kMinDeadline. A persistent straggler arrives after the median and moves T by
// nothing: the others stop waiting for it after T. Ordinary noise is covered twice over, so
// ordinary rounds wait for everybody. A T that cuts rounds off before half the ranks arrived
// doubles (those rounds report at least T). Until kWindow rounds were measured there is no T:
// rounds wait for every rank, as adaptive rounds start synchronous.
//
// Why the coordinators' clocks and not the compute times adaptive rounds carry: those are the
// time outside this object's calls, which for an application that polls for results (rather than
// waiting in wait()) includes the wait itself; in the simulation every rank then measured the
// same ~11 steps and T covered the straggler. Driver only.
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
  // T in force, or none while fewer than kWindow rounds were measured.
  std::optional<std::chrono::microseconds> deadline() const { return deadline_; }

 private:
  std::vector<uint32_t> spreads_;  // the last kWindow spreads, in us (a ring)
  size_t next_ = 0;
  std::vector<uint32_t> scratch_;
  std::optional<std::chrono::microseconds> deadline_;
};

}  // namespace eagercomm::detail
