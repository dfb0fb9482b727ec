// One rank's part of eagercomm-bench: times a collective over a range of sizes and checks
// its results. Written against the Communicator only, so the same code runs whether ranks are
// threads (now) or processes (launchers).
#pragma once

#include <cstdint>
#include <vector>

#include "bench/bench_options.h"
#include "collectives/communicator.h"

namespace eagercomm::bench {

struct Timing {
  double median_us = 0;
  double p99_us = 0;
  double mean_us = 0;
  uint64_t wrong = 0;  // result elements that differ from the expected value, over all ranks
};

struct Row {
  size_t bytes = 0;  // nccl-tests convention: the whole result (allgather: all ranks' blocks)
  size_t count = 0;  // elements per rank's input
  Timing out_of_place;
  Timing in_place;
};

// Element i of rank `rank`'s input: small integers, exact in every type and in every sum over up
// to a few hundred ranks, so results are compared exactly.
double pattern(int rank, size_t i);
// Element i of the allreduce result over `ranks` ranks of pattern().
double reduce_expected(ReduceOp op, int ranks, size_t i);

// Collective over all ranks of `comm`; every rank returns the same rows. An iteration's time is
// the slowest rank's time from a common barrier to its completion.
Result<std::vector<Row>> run_collective(Communicator& comm, const Options& options);

// nccl-tests' bus bandwidth factor: what busbw = algbw * factor means for each collective.
double busbw_factor(Collective coll, int ranks);

// Single-thread memcpy bandwidth samples of this machine, GB/s, one per copy of `bytes`.
// eagercomm-bench takes them before and after the collectives and reports the median of all,
// so the reference and the measurement see the same machine state.
std::vector<double> memcpy_gbps_samples(size_t bytes, int reps);
double median(std::vector<double> samples);

}  // namespace eagercomm::bench
