// The schedule explorer (issue 21, item 5): partial allreduce rounds of the real library over the
// simulated network, under a schedule drawn from a seed, checked against the invariants of the
// partial collective (collectives/partial_allreduce.h):
//   - every rank receives rounds 0, 1, 2, ... in order, and the same round carries the same sum
//     and the same metadata on every rank (identical replicas);
//   - a round's metadata agrees with its data (a rank's posts folded in = the count its
//     gradients put in the sum; age 0 means fresh; contributors = ranks with posts);
//   - every post is applied exactly once (conservation: the results of the rounds up to the
//     flush add up to every post; under late=drop, to every post not dropped);
//   - staleness is bounded by sync_every (for ranks that take a result between posts), and rounds
//   meet their mode's guarantee (sync: every
//     rank fresh; quorum(k): at least k; any round outside a flush: at least one);
//   - a rank that dies is reported to every survivor (no survivor waits for ever), and no
//     survivor's results count any post twice.
// What a seed draws: the world (2 .. 9 ranks, a tenth 10 .. 24, mailbox slots, allreduce
// algorithm), the object (mode, late policy, sync_every, result_depth, size), the ranks' compute
// per step with injected stragglers, message jitter within the contract's per-pair order, the order
// in which ranks runnable at one instant run, and at most one stall (a rank whose process stops for
// a while) and one leave (its process dies, or it destroys its object while the others go on). The
// timed part replays bit for bit from its seed; the flush at the end runs on one thread per rank
// (the simulation's setup mode), so its interleaving is the machine's.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/status.h"

namespace eagercomm::sim {

struct ExploreCase {
  uint64_t seed = 0;
  int ranks = 4;
  std::string mode = "solo";  // as parse_partial_mode reads it
  bool drop_late = false;
  // The ranks' loop: EagerSgd's (false: after each post, take at least one result, waiting if
  // none is there) or one that posts whenever its compute is done and takes whatever has come,
  // so that several posts may be meant for one round (no staleness bound then).
  bool post_without_result = false;
  uint32_t sync_every = 0;
  uint32_t result_depth = 4;
  size_t count = 16;  // f32 elements
  int slots = 8;
  size_t slot_bytes = 256 * 1024;
  std::string algo = "auto";
  int steps = 6;
  double compute_us = 100;  // mean per step; each (rank, step) draws 0.2x .. 3x of it
  double straggle = 0;      // chance per step that one drawn rank computes 10x longer
  int64_t jitter_ns = 0;
  bool shuffle = false;
  int stall_rank = -1;  // whose process stops at the start of stall_step, for stall_us
  int stall_step = 0;
  double stall_us = 0;
  int death_rank = -1;  // who dies at death_us (virtual), detected detect_us later
  double death_us = 0;
  double detect_us = 0;
  bool destroy_instead = false;  // death_rank destroys its object at death_us instead of dying
  // Outside the contract (sim_network.h, Perturbation::corrupt_from): from the n-th payload
  // delivered on, payloads arrive with a byte changed. Never drawn: shows that the explorer
  // notices.
  uint64_t corrupt_from = 0;

  // One line, for a failure's report.
  std::string describe() const;
};

// Deaths make every survivor log warnings (notices it could not send to the dead rank): for runs
// of many seeds, only errors are logged from then on, unless EAGERCOMM_LOG_LEVEL is set.
void quiet_explorer_logs();

// The case a seed stands for (every seed is a valid case).
ExploreCase draw_case(uint64_t seed);

struct ExploreOutcome {
  uint64_t rounds = 0;        // rounds rank 0 (a survivor) received, the flush's included
  uint64_t timed_rounds = 0;  // of those, before the flush (the part that replays bit for bit)
  bool died = false;          // a rank died before the run was over
  int told_of_death = 0;      // survivors whose rounds failed naming the dead rank
  double virtual_ms = 0;      // when the timed part ended
};

// Runs one case: OK with what happened when every invariant held; otherwise kInternal naming the
// seed, the case and the broken invariant ("seed 17: ... identical replicas: round 3 differs
// between rank 0 and rank 2"). Only one simulation runs per process at a time.
Result<ExploreOutcome> explore(const ExploreCase& c);

}  // namespace eagercomm::sim
