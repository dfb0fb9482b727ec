// Command line of eagercomm-train.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collectives/partial_allreduce.h"
#include "runtime/status.h"
#include "sgd/eager_sgd.h"

namespace eagercomm::sgd {

struct TrainOptions {
  std::string model = "cnn";                               // cnn | resnet20 | lstm
  std::vector<PartialMode> modes = {PartialMode::solo()};  // trained one after the other
  int epochs = 1;
  int batch = 64;  // per rank
  double lr = 0.05;
  double momentum = 0.9;
  // Momentum of the eager modes (solo, majority, quorum, adaptive); negative: `momentum`. Staleness
  // acts like extra momentum (Mitliagkas et al., "Asynchrony begets momentum", 2016), but the
  // default staleness rule (kMomentum) already lowers each round's momentum by the staleness it
  // measures: a lower fixed eager default on top would correct twice. With --staleness none or
  // rate, --eager-momentum is the way to correct by hand.
  double eager_momentum = -1;
  double eager_momentum_in_force() const { return eager_momentum >= 0 ? eager_momentum : momentum; }
  StalenessRule staleness = StalenessRule::kMomentum;
  // Evaluate an exponential average of the parameters (SgdOptions::average_decay); 0: the
  // parameters themselves.
  double average_decay = 0.0;
  double solo_speedup = PartialOptions{}.solo_speedup;  // adaptive mode
  double weight_decay = 5e-4;
  uint64_t warmup_rounds = 0;
  std::vector<uint64_t> milestones;  // rounds
  double gamma = 0.1;
  uint32_t sync_every = 0;
  int imbalance_k = 0;  // --imbalance K:D: each step K ranks (shared PRNG) sleep D ms
  double imbalance_ms = 0.0;
  bool imbalance_linear = false;  // --imbalance linear:D: rank r sleeps r * D ms every step
  // Epochs of the eager modes (0: --epochs). With more than --epochs, time to sync's accuracy
  // can be measured for runs that need longer; accuracy "at equal epochs" is read at --epochs.
  int eager_epochs = 0;
  // Eager modes stop at the first evaluation, after --epochs epochs, that reaches the seed's sync
  // accuracy (needs sync first in --mode).
  bool stop_at_target = false;
  // --on-failure continue: a rank that dies or hangs leaves the survivors training (the rounds'
  // on_failure=continue; the trainer's own collectives shrink the communicator too).
  OnFailure on_failure = OnFailure::kFail;
  // --die-at R:S, fault injection for tests and demonstrations: rank R (as numbered at the
  // start) SIGKILLs itself before its step S (counted over the run, from 0). -1: nobody.
  int die_rank = -1;
  uint64_t die_step = 0;
  int epochs_for(const PartialMode& m) const {
    return m.kind == PartialKind::kSync || eager_epochs <= 0 ? epochs : eager_epochs;
  }
  uint64_t seed = 1;
  // Every mode is trained once per seed (seeds outer, modes inner); empty: just `seed`. The
  // sequence task's data set is drawn from `seed` alone, so that the runs of several seeds
  // differ in initialisation, shuffling and imbalance draws only, as the image runs do.
  std::vector<uint64_t> seeds;
  std::vector<uint64_t> seeds_in_force() const {
    return seeds.empty() ? std::vector<uint64_t>{seed} : seeds;
  }
  // Test evaluations per epoch at equally spaced steps, the last at the epoch's end (and one
  // before training, at time 0).
  int evals_per_epoch = 1;
  std::string json;        // write the report as JSON to this file ("-": standard output)
  std::string curve;       // write (mode, seed, epoch, seconds, accuracy) rows as CSV here
  std::string data_dir;    // Fashion-MNIST directory (default: Debian's)
  size_t train_limit = 0;  // use the first N training samples (0: all)
  size_t test_limit = 0;   // evaluate on the first N test samples (0: all)
  int threads = 1;         // torch intra-op threads per rank
  int log_every = 50;      // steps between progress lines on rank 0 (0: none)
  bool help = false;
};

// Parses argv[1..]; errors name the option and the bad value.
Result<TrainOptions> parse_train_options(int argc, char** argv);
// The --help text.
std::string train_usage();

}  // namespace eagercomm::sgd
