// Internal: which rounds of an adaptive partial allreduce run solo and which synchronously.
// Not installed.
//
// A partial round pays for its speed with stale gradients; it is worth that only when it makes an
// epoch clearly faster. Each delivered round's metadata (identical on every rank: partial_meta.h)
// says how long every rank computed before each post it holds, and from that this class predicts
// the time per step under each regime:
//   synchronous: a step lasts as long as the slowest rank's compute of that step: the mean over
//                steps of the step's largest compute (a rank's k-th post is its k-th step, counted
//                from the posts every round's metadata reports, whichever rounds they landed in);
//   solo:        every rank computes at its own pace and an epoch ends with the slowest rank's
//                shard: the largest over ranks of that rank's mean compute per post.
// Their ratio is the speedup per epoch that solo rounds would give. Rounds are grouped in windows
// of `window` rounds; once window k is delivered, window k + 2 is decided from windows k - 1 and k:
// solo when the predicted speedup reaches `solo_speedup`, synchronous otherwise, and synchronous
// while nothing has been measured. Every rank computes the same decision from the same numbers,
// a full window before it can act on any round it decides (a rank activates at most
// result_depth + 1 rounds past the last it delivered, and the window is longer than that). If a
// rank ever asks about a window not decided yet it gets the latest decision: ranks that disagree
// about a round only cost each other time, never a gradient (any rank's activation enters the
// round everywhere).
//
// What it does not see: a rank that is slow at every step (rank r sleeping r x 10 ms) makes solo
// rounds little faster per epoch (every rank still has its shard to do), and the prediction says
// so (the slowest rank's mean is the synchronous step too), so such a setup runs synchronously.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "collectives/partial/partial_meta.h"

namespace eagercomm::detail {

class AdaptiveRegime {
 public:
  AdaptiveRegime(int size, uint64_t window, double solo_speedup);

  // Round `round`'s summed metadata (one entry per rank). Rounds come in order from 0; a round
  // out of order is ignored.
  void observe(uint64_t round, std::span<const RankMeta> metas);

  // Whether `round` runs solo (false: synchronously).
  bool solo(uint64_t round) const;

  // The speedup per epoch of solo rounds predicted at the latest decision (0 before the first).
  double predicted_speedup() const { return predicted_; }
  uint64_t window() const { return window_; }

 private:
  struct Measure {
    double max_sum = 0;       // over steps every rank measured: the step's largest compute
    uint64_t steps = 0;       // such steps
    std::vector<double> sum;  // per rank: compute before its measured posts, summed
    std::vector<uint64_t> n;  // per rank: posts measured
    void clear();
  };
  // A step some rank has posted and another has not yet.
  struct Step {
    double max = 0;
    int seen = 0;
    bool measured = true;  // every rank's post for it was measured
  };
  void record(int rank, double compute, bool measured);
  void decide(uint64_t decided_window);

  const int size_;
  const uint64_t window_;
  const double solo_speedup_;
  uint64_t next_ = 0;  // the round observe() expects
  Measure previous_, current_;
  std::vector<uint64_t> posts_;  // per rank: posts reported so far (its next post's step)
  std::deque<Step> steps_;       // steps from first_step_ on that not every rank has posted
  uint64_t first_step_ = 0;
  // A rank that has stopped posting must not make the others' steps pile up without bound.
  static constexpr size_t kMaxPendingSteps = 1 << 14;
  // Decisions by window number, for the last few windows (ring).
  static constexpr size_t kKept = 8;
  std::array<uint64_t, kKept> decided_window_{};
  std::array<bool, kKept> decided_solo_{};
  bool any_decided_ = false;
  uint64_t latest_window_ = 0;
  bool latest_solo_ = false;
  double predicted_ = 0;
};

}  // namespace eagercomm::detail
