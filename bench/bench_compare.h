// eagercomm-bench --compare mpi,gloo: eagercomm's allreduce and other libraries' on the same
// processes and the same buffers. Every iteration runs each library once, in turn, each call
// started from a common MPI_Barrier, so machine noise hits all of them alike; a call's time is
// the slowest rank's.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "bench/baselines.h"
#include "bench/bench_options.h"

namespace eagercomm::bench {

struct CompareCell {
  double median_us = 0;
  double p99_us = 0;
  uint64_t wrong = 0;  // result elements differing from the expected value, over all ranks
};

struct CompareRow {
  size_t bytes = 0;
  size_t count = 0;
  std::vector<CompareCell> cells;  // [0]: eagercomm, then the baselines in --compare order
};

// Runs on every rank (collective over MPI_COMM_WORLD and `comm`); every rank returns the rows.
Result<std::vector<CompareRow>> run_compare(Communicator& comm, const Options& o,
                                            const std::vector<Baseline>& baselines);

void print_compare(FILE* out, const Options& o, int ranks, const std::string& transport,
                   const std::vector<Baseline>& baselines, const std::vector<CompareRow>& rows);
std::string compare_json(const Options& o, int ranks, const std::string& transport,
                         const std::vector<Baseline>& baselines,
                         const std::vector<CompareRow>& rows);

}  // namespace eagercomm::bench
