// Collectives timed in a SimWorld: every rank calls the collective `iters` times back to back
// through the non-blocking API; the result is virtual time, checked values and the network's
// counts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/sim_world.h"

namespace eagercomm::sim {

struct CollectiveRun {
  std::string collective = "allreduce";  // allreduce | broadcast | barrier
  size_t bytes = 1024;                   // f32 elements x 4 (allreduce, broadcast)
  int iters = 3;
};

struct CollectiveResult {
  double time_us = 0;   // virtual time per call: until the last rank finished, / iters
  double first_us = 0;  // the first call alone: when its last rank finished (a latency, what
                        // the closed forms model; later calls may overlap the previous ones)
  std::vector<double> call_end_us;  // when the last rank finished each call (from the start)
  bool checked = false;             // the values were compared (payloads copied)
  uint64_t wrong = 0;               // elements that differ from the expected value
  NetworkStats network;             // messages and bytes of this run
  uint32_t connections = 0;         // the most connections a rank holds afterwards
  double wall_s = 0;                // real time the loop took
};

// kInvalidArgument for an unknown collective or a size that is not whole f32 elements; the
// first error a rank's call returns otherwise.
Result<CollectiveResult> run_collective(SimWorld& world, const CollectiveRun& run);

}  // namespace eagercomm::sim
