// Partial allreduce rounds timed in a SimWorld (issue 21, item 3): every rank computes, posts its
// gradient and waits for a round's result, `steps` times, as eagercomm-bench --imbalance and
// eager-SGD do; in each step `stragglers` ranks drawn from a shared seeded PRNG compute `delay`
// longer (the paper's injection). Compute does not stop a rank's engine (the progress thread's
// job on a real machine): the loop keeps running it on every message.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectives/partial_allreduce.h"
#include "sim/sim_world.h"

namespace eagercomm::sim {

struct PartialRun {
  std::string mode = "solo";  // solo | majority | quorum:K | sync | adaptive | deadline:T
  size_t bytes = 4096;        // f32 gradient
  int steps = 20;
  double compute_us = 100;  // per step, every rank
  int stragglers = 0;       // ranks drawn per step
  double delay_us = 1000;   // what a drawn rank computes more
  uint64_t seed = 1;
  uint32_t result_depth = 4;  // PartialOptions::result_depth
};

struct PartialResult {
  double fast_step_us = 0;    // mean step time of ranks not drawn in that step
  double slow_step_us = 0;    // of drawn ranks (0 without stragglers)
  double fresh_fraction = 0;  // mean over rank 0's rounds of fresh ranks / P
  double stale_mean = 0;      // mean age of the carried contributions (rounds)
  int stale_max = 0;
  uint64_t rounds = 0;  // rounds rank 0 received
  NetworkStats network;
  uint32_t connections = 0;  // the most connections a rank holds afterwards
  double wall_s = 0;
};

Result<PartialResult> run_partial(SimWorld& world, const PartialRun& run);

// Creates a PartialAllreduce of `count` f32 on every rank of `world` (collective: one thread per
// rank), then settles the world.
Result<std::vector<std::unique_ptr<PartialAllreduce>>> make_partial_objects(
    SimWorld& world, size_t count, PartialMode mode, const PartialOptions& options);

// Activation latency (issue 21, item 3): one rank posts into a solo object while every other
// rank computes; how long after the post each rank enters the round (the activation flood).
struct ActivationResult {
  double last_us = 0;  // the last rank to enter, after the post
  double mean_us = 0;  // over the other ranks
};
Result<ActivationResult> run_activation(SimWorld& world, size_t bytes, int initiator);

}  // namespace eagercomm::sim
