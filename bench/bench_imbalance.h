// eagercomm-bench --imbalance: the full allreduce against the partial modes under injected
// delays (the paper's experiment). Each iteration a rank sleeps its injected delay (its
// "compute"), then either calls the full allreduce or runs the eager-SGD step (post, apply what
// completed, wait only if nothing completed since its previous post). Iteration times are split
// by whether the rank was delayed in that iteration.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "bench/baselines.h"
#include "bench/bench_options.h"
#include "collectives/communicator.h"

namespace eagercomm::bench {

struct ImbalanceRow {
  double delay_ms = 0;
  size_t bytes = 0;
  std::string mode;           // "full", "solo", "majority", "quorum(2)", ...
  double fast_median_ms = 0;  // iterations without an injected delay (NaN when none)
  double fast_p99_ms = 0;
  // Their mean: what throughput sees (a solo rank that finds its round complete does not wait,
  // so the median mixes iterations that waited with ones that did not).
  double fast_mean_ms = 0;
  double slow_median_ms = 0;  // iterations with one (NaN when none)
  double slow_mean_ms = 0;
  double slow_p99_ms = 0;
  double fresh_fraction = 1;  // mean over rounds of fresh contributions / P
  double stale_mean = 0;      // mean age in rounds of the data ranks contributed
  int stale_max = 0;
  uint64_t rounds = 0;      // rounds delivered during the timed iterations
  double vs_full = 0;       // fast_median_ms / the full allreduce's, same delay and size
  double vs_full_mean = 0;  // fast_mean_ms / the full allreduce's
  double vs_baseline = 0;   // fast_median_ms / the first baseline's (--compare), else NaN
};

// The injected delay of `rank` in `iteration` (identical on every rank: shared PRNG).
double injected_delay_ms(const Options& o, int ranks, int rank, int iteration, double delay_ms);

// Runs on every rank of `comm`; every rank returns the same rows. Baselines (--compare) run as
// extra modes named after them, first, with the same delays: their full allreduce is the
// reference of vs_baseline.
Result<std::vector<ImbalanceRow>> run_imbalance(Communicator& comm, const Options& o,
                                                const std::vector<Baseline>& baselines = {});

void print_imbalance(FILE* out, const Options& o, int ranks, const std::string& transport,
                     const std::vector<ImbalanceRow>& rows,
                     const std::vector<Baseline>& baselines = {});
std::string imbalance_json(const Options& o, int ranks, const std::string& transport,
                           const std::vector<ImbalanceRow>& rows);

}  // namespace eagercomm::bench
