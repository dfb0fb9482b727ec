// eagercomm-train's training loop: one data-parallel training run per mode on a communicator,
// with eager SGD, injected imbalance and a report (wall time, throughput, accuracy, freshness).
#pragma once

#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "runtime/status.h"
#include "sgd/train/train_options.h"

namespace eagercomm::sgd {

struct EpochPoint {
  int epoch = 0;
  double seconds = 0;   // training wall-clock time so far (evaluation excluded)
  double accuracy = 0;  // test accuracy after the epoch
  double loss = 0;      // mean training loss of the epoch on this rank
};

struct ModeReport {
  std::string mode;
  double seconds = 0;         // training wall-clock time (slowest rank), evaluation excluded
  double samples_per_s = 0;   // all ranks' training samples / seconds
  double accuracy = 0;        // final test accuracy
  double loss = 0;            // last epoch's mean training loss (rank 0)
  double fresh_fraction = 0;  // mean fraction of fresh contributions per applied round
  double mean_staleness = 0;  // rounds, per applied round's oldest contribution
  int max_staleness = 0;
  uint64_t rounds = 0;
  uint64_t steps = 0;    // per rank
  double waiting_s = 0;  // rank 0: blocked for rounds
  std::vector<EpochPoint> curve;
};

// Trains options.model once per options.modes entry, every rank of `comm` calling it.
// Errors (a missing data set, a failing peer) come back on every rank.
Result<std::vector<ModeReport>> train(Communicator& comm, const TrainOptions& options);

// The ranks that sleep at step `step` of an --imbalance K:D run: K distinct ranks drawn from
// (seed, step), identical on every rank.
std::vector<int> delayed_ranks(uint64_t seed, uint64_t step, int size, int k);

// The side-by-side table (speedup relative to the first "sync" report, if any).
std::string format_reports(const std::vector<ModeReport>& reports, const TrainOptions& options,
                           int size);
std::string reports_to_json(const std::vector<ModeReport>& reports, const TrainOptions& options,
                            int size);
std::string curves_to_csv(const std::vector<ModeReport>& reports);

}  // namespace eagercomm::sgd
