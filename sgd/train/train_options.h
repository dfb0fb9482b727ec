// Command line of eagercomm-train.
#pragma once

#include <algorithm>

#include <cstdint>
#include <string>
#include <vector>

#include "collectives/partial_allreduce.h"
#include "runtime/status.h"

namespace eagercomm::sgd {

struct TrainOptions {
  std::string model = "cnn";                               // cnn | resnet20 | lstm
  std::vector<PartialMode> modes = {PartialMode::solo()};  // trained one after the other
  int epochs = 1;
  int batch = 64;  // per rank
  double lr = 0.05;
  double momentum = 0.9;
  // Momentum of the eager modes (solo, majority, quorum); negative: the default, the smaller of
  // kDefaultEagerMomentum and `momentum`. Staleness acts like extra momentum (Mitliagkas et al.,
  // "Asynchrony begets momentum", 2016), so eager modes want less explicit momentum than sync:
  // sgd/EXPERIMENTS.md measures 0.7 against 0.9 (ResNet-20: 9-12 points of accuracy).
  static constexpr double kDefaultEagerMomentum = 0.7;
  double eager_momentum = -1;
  double eager_momentum_in_force() const {
    return eager_momentum >= 0 ? eager_momentum : std::min(kDefaultEagerMomentum, momentum);
  }
  double weight_decay = 5e-4;
  uint64_t warmup_rounds = 0;
  std::vector<uint64_t> milestones;  // rounds
  double gamma = 0.1;
  uint32_t sync_every = 0;
  int imbalance_k = 0;  // --imbalance K:D: each step K ranks (shared PRNG) sleep D ms
  double imbalance_ms = 0.0;
  uint64_t seed = 1;
  std::string json;        // write the report as JSON to this file ("-": standard output)
  std::string curve;       // write (mode, epoch, seconds, accuracy) rows as CSV to this file
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
