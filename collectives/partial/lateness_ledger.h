// Internal: straggler attribution (issue 22, item 2). Not installed.
//
// Every rank takes every round's result with every rank's metadata (fresh, age, posts: the
// round's tail, partial_meta.h), so every rank can say, per rank, how many of its posts were
// fresh and how many landed late, in how many rounds it contributed nothing, and how many
// rounds late its carried posts were: the same figures on every rank. Time late is those rounds
// times the mean time between rounds this rank measured while taking them (an estimate: the rounds
// carry no arrival times). The ledger is updated by the application thread as it takes results
// (PartialAllreduce::poll), so it needs no synchronization.
//
// The periodic report (EAGERCOMM_STRAGGLER_REPORT = N rounds; rank 0 logs it) names the
// *persistent* stragglers of the last N rounds: ranks at least half of whose posts there landed
// late, worst first.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "collectives/dtype.h"
#include "collectives/partial_allreduce.h"

namespace eagercomm::detail {

class LatenessLedger {
 public:
  explicit LatenessLedger(int ranks) : counts_(static_cast<size_t>(ranks)) {}

  // Round `round`'s metadata (`tail` of `type`), taken at `now`.
  void account(uint64_t round, const void* tail, DataType type,
               std::chrono::steady_clock::time_point now);
  // Every rank's figures over the rounds taken so far.
  std::vector<RankLateness> totals() const;
  uint64_t rounds() const { return rounds_; }
  int ranks() const { return static_cast<int>(counts_.size()); }
  // The persistent stragglers since the previous call (or the start), as one line: "rounds
  // 100-199: persistent stragglers: rank 3 late with 96 of 100 posts (by 1.9 rounds, ~12.4 ms,
  // on average), ..." or, when no rank was late with half its posts, "rounds 100-199: no
  // persistent straggler (latest: rank 2, 12 of 100 posts late)". Empty when no round was taken
  // since.
  std::string window_report();

 private:
  struct Counts {
    uint64_t posts = 0;
    uint32_t fresh = 0;
    uint32_t late = 0;
    uint32_t absent = 0;
    uint32_t max_age = 0;
    uint64_t late_rounds = 0;
  };
  // Seconds per round measured so far (0 before two rounds).
  double seconds_per_round() const;

  std::vector<Counts> counts_;
  std::vector<Counts> window_start_;  // counts_ at the last report (made by the first report)
  uint64_t rounds_ = 0;
  uint64_t window_first_round_ = 0;
  uint64_t window_rounds_ = 0;  // rounds_ at the last report
  std::chrono::steady_clock::time_point first_taken_{};
  std::chrono::steady_clock::time_point last_taken_{};
};

}  // namespace eagercomm::detail
