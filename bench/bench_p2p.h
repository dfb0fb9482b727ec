// eagercomm-bench --p2p: one transport's write + notification between ranks 0 and 1 of a job,
// without the collectives above it: the cost the collectives build on, comparable with
// ucx_perftest's ucp_put_lat / ucp_put_bw (bench/compare_p2p.sh runs both).
//
// Latency: ping-pong. Rank 0 writes `size` bytes into rank 1's transport-allocated region with a
// notification; rank 1, on seeing it, writes back; half the round trip is the latency.
// Bandwidth: rank 0 keeps --window writes in flight, then waits for rank 1's acknowledgement
// after the last one; bytes written / time.
// Other ranks of the job join (transport selection is collective) and wait.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "bench/bench_options.h"
#include "runtime/status.h"

namespace eagercomm::bench {

struct P2pRow {
  size_t bytes = 0;
  double latency_us = 0;       // one way: half the median round trip
  double latency_mean_us = 0;  // half the mean round trip (what ucx_perftest calls average)
  double latency_p99_us = 0;
  double bandwidth_gbps = 0;
};

struct P2pReport {
  std::string transport;
  int ranks = 0;
  bool reports = false;  // this process is rank 0 (it measured the rows)
  std::vector<P2pRow> rows;
};

// Joins the job this process was started in (eagercomm-run, torchrun, srun, mpirun with
// EAGERCOMM_MASTER_ADDR) and measures.
Result<P2pReport> run_p2p(const Options& o);

void print_p2p(FILE* out, const Options& o, const P2pReport& report);
std::string p2p_json(const Options& o, const P2pReport& report);

}  // namespace eagercomm::bench
