// eagercomm-train's training loop: one data-parallel training run per seed and mode on a
// communicator, with eager SGD, injected imbalance and a report (time to accuracy, wall time,
// throughput, freshness), aggregated over the seeds.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "runtime/status.h"
#include "sgd/train/metrics.h"
#include "sgd/train/train_options.h"

namespace eagercomm::sgd {

// One test evaluation: before training (epoch 0, time 0) and --evals-per-epoch times an epoch.
struct EpochPoint {
  double epoch = 0;     // epochs done (steps done / steps per epoch)
  uint64_t step = 0;    // steps done per rank
  double seconds = 0;   // training wall-clock time so far (slowest rank, evaluation excluded)
  double accuracy = 0;  // test accuracy then
  // Mean training loss on rank 0 over the steps since the previous evaluation (NaN before
  // training).
  double loss = 0;
};

struct ModeReport {
  std::string mode;
  uint64_t seed = 0;
  double seconds = 0;         // training wall-clock time (slowest rank), evaluation excluded
  double samples_per_s = 0;   // all ranks' training samples / seconds
  double accuracy = 0;        // test accuracy after --epochs epochs (equal epochs)
  double final_accuracy = 0;  // test accuracy at the end (after --eager-epochs for eager modes)
  double equal_epoch_seconds = 0;  // training time of the first --epochs epochs
  double loss = 0;                 // last epoch's mean training loss (rank 0)
  double fresh_fraction = 0;       // mean fraction of fresh contributions per applied round
  double mean_staleness = 0;       // rounds, per applied round's oldest contribution
  int max_staleness = 0;
  uint64_t rounds = 0;
  uint64_t steps = 0;        // per rank
  double waiting_s = 0;      // rank 0: blocked for rounds
  double mean_momentum = 0;  // momentum in force, mean over applied rounds (staleness rule)
  std::vector<EpochPoint> curve;
  std::vector<RankLateness> lateness;  // straggler attribution, per rank, at the end

  // Against the other runs of the same seed (compare_runs()); empty without a sync run.
  std::optional<double> epoch_speedup;          // sync's seconds / equal_epoch_seconds
  std::optional<double> target_accuracy;        // the sync run's final accuracy
  std::optional<double> time_to_sync_accuracy;  // s; empty when never reached
  std::optional<double> tta_speedup;            // sync's time to it / this run's
  double equal_time = 0;                        // s: the shortest run of the seed
  double accuracy_at_equal_time = 0;
};

// Trains options.model once per seed and options.modes entry (seeds outer), every rank of `comm`
// calling it, then compare_runs(). Errors (a missing data set, a failing peer) come back on
// every rank.
Result<std::vector<ModeReport>> train(Communicator& comm, const TrainOptions& options);

// Fills the comparison fields of every report against the other reports of its seed: the target
// is the seed's first "sync" report's final accuracy, the equal time its shortest run.
void compare_runs(std::vector<ModeReport>& reports);

// The ranks that sleep at step `step` of an --imbalance K:D run: K distinct ranks drawn from
// (seed, step), identical on every rank.
std::vector<int> delayed_ranks(uint64_t seed, uint64_t step, int size, int k);

// The side-by-side table: one row per mode, aggregated over the seeds.
std::string format_reports(const std::vector<ModeReport>& reports, const TrainOptions& options,
                           int size);
// Every run with its curve, and a summary per mode (the table's aggregates; null: none).
std::string reports_to_json(const std::vector<ModeReport>& reports, const TrainOptions& options,
                            int size);
// mode,seed,epoch,step,seconds,accuracy,loss rows, one per evaluation.
std::string curves_to_csv(const std::vector<ModeReport>& reports);

}  // namespace eagercomm::sgd
