// eagercomm-bench --compare mpi,gloo,nccl: eagercomm's allreduce and other libraries' on the
// same processes and the same buffers (host or, with --device cuda, GPU memory). Every iteration
// runs each library once, in turn, each call started from a common barrier (MPI's in an MPI job,
// else eagercomm's), so machine noise hits all of them alike; a call's time is the slowest
// rank's.
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

// Runs on every rank (collective over `comm`, and over MPI_COMM_WORLD when `mpi`: then MPI's
// barrier and reductions frame the timings); every rank returns the rows.
Result<std::vector<CompareRow>> run_compare(Communicator& comm, const Options& o,
                                            const std::vector<Baseline>& baselines, bool mpi);

void print_compare(FILE* out, const Options& o, int ranks, const std::string& transport,
                   const std::vector<Baseline>& baselines, const std::vector<CompareRow>& rows);
std::string compare_json(const Options& o, int ranks, const std::string& transport,
                         const std::vector<Baseline>& baselines,
                         const std::vector<CompareRow>& rows);

}  // namespace eagercomm::bench
