// EagerSgd: data-parallel momentum SGD on top of PartialAllreduce (docs/ARCHITECTURE.md, "The
// eager-SGD layer"), over one flat parameter buffer and one flat gradient buffer, independent of
// any framework.
//
//   auto opt = sgd::EagerSgd::create(comm, params, grads, n, sgd::MemoryKind::kHost, options);
//   for (step ...) {
//     compute_gradient(params, grads);   // the framework's forward/backward
//     opt.value()->step();               // post grads / P, apply every completed round
//   }
//   opt.value()->finish();               // flush: every posted gradient applied exactly once
//
// step() posts the gradient divided by P (the buffer is scaled in place) into the partial
// allreduce, then applies every round that has completed, in round order. It blocks only when
// no round has completed since its own previous post: a fast rank waits for the round its post
// started, a late rank applies what finished while it computed and goes on. Every rank applies
// the same rounds in the same order with the same arithmetic (the rate is a function of the
// round, see LrSchedule), so replicas stay bit-identical without copying checkpoints around;
// create() broadcasts rank 0's initial parameters so that they also start identical.
//
// The update of round r, with g the round's sum (the mean of the fresh and carried gradients it
// contains, each rank having divided by P) and PyTorch's conventions:
//   d = g + weight_decay * p;   v = mu(r) * v + d;   p -= lr(r) * v
// A round that carries no gradient from any rank (a flush's last round, say) is no step: it
// leaves parameters and velocity alone, as torch.optim.SGD does between two steps. (It used to
// apply momentum and decay once more, about nine steps' worth of movement along the velocity at
// every evaluation, which put synchronous rounds 0.9 points below DDP: sgd/EXPERIMENTS.md.)
// mu(r) is `momentum`, corrected for staleness by the default rule (StalenessRule): a gradient
// computed s rounds ago acts as momentum of its own (Mitliagkas et al., "Asynchrony begets
// momentum", 2016), so with s the running mean staleness of the applied rounds the explicit
// momentum is lowered to keep the total where `momentum` puts it for fresh gradients:
//   1 - mu(r) = (1 - momentum) (1 + s).
// Fresh rounds keep `momentum` exactly; solo rounds under a straggler, whose contributions are
// about one round old on average, get about 0.8 out of 0.9 (sgd/EXPERIMENTS.md). s comes from
// the round metadata, identical on every rank.
//
// Threading: one application thread per object; the communicator's progress thread takes part
// in rounds while the application computes.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/partial_allreduce.h"
#include "runtime/status.h"
#include "sgd/lr_schedule.h"

namespace eagercomm::sgd {

// Where the flat buffers live. Only host memory is supported so far; CUDA buffers come with the
// GPU transport (issue #6) and are refused with kNotSupported until then.
enum class MemoryKind : uint8_t { kHost = 0, kCuda = 1 };

// How a round's update accounts for the staleness of the gradients it carries.
enum class StalenessRule : uint8_t {
  kNone = 0,      // momentum and rate as configured, whatever the staleness
  kMomentum = 1,  // 1 - mu(r) = (1 - momentum)(1 + s), s the running mean staleness (default)
  kRate = 2,      // lr(r) / (1 + s_r), s_r the round's own mean staleness (Zhang et al. 2016,
                  // "Staleness-aware Async-SGD", applied per round to the summed gradient)
  kStep = 3,      // mu(r) as kMomentum, and lr(r) (1 - mu(r)) / (1 - momentum): the same trade of
                  // explicit for implicit momentum, keeping each gradient's total step
                  // lr / (1 - mu) where `momentum` puts it (kMomentum shrinks it by 1 + s);
                  // 1.6-2.8 points below kMomentum at equal epochs (sgd/EXPERIMENTS.md)
};
// "none", "momentum", "rate", "step".
std::string staleness_rule_name(StalenessRule rule);
Result<StalenessRule> parse_staleness_rule(std::string_view text);

struct SgdOptions {
  PartialMode mode = PartialMode::solo();
  PartialOptions partial;  // late policy, sync_every, seed, result_depth
  LrSchedule lr;
  double momentum = 0.9;      // [0, 1)
  double weight_decay = 0.0;  // >= 0
  StalenessRule staleness = StalenessRule::kMomentum;
  // An exponential average of the parameters over the rounds that are steps,
  //   a = average_decay * a + (1 - average_decay) * p,
  // kept beside them (averaged()) for evaluation. 0 keeps none; [0, 1). Measured at 2 epochs
  // (sgd/EXPERIMENTS.md): +1.2-1.9 points for synchronous rounds, nothing for solo rounds.
  double average_decay = 0.0;
  // Rank 0's parameters are broadcast at create() so that every replica starts identical.
  bool broadcast_initial = true;
  // How long step() waits for a round before giving up, by the rule of every timeout
  // (communicator.h, "Timeouts"): kConfiguredTimeout is EAGERCOMM_TIMEOUT, kWaitForever no
  // limit, other negative values are refused by create(). finish() always uses
  // EAGERCOMM_TIMEOUT (the flush's own limit).
  std::chrono::nanoseconds timeout = kConfiguredTimeout;
};

struct SgdStats {
  uint64_t steps = 0;                // step() calls
  uint64_t rounds_applied = 0;       // results applied (== rounds, identical on every rank)
  uint64_t empty_rounds = 0;         // of those, rounds no rank had a gradient in: no step
  uint64_t fresh_posts = 0;          // own posts that landed in the round they were meant for
  uint64_t late_posts = 0;           // own posts carried into a later round (or dropped)
  uint64_t blocking_steps = 0;       // steps that had to wait for a round
  uint64_t fresh_contributions = 0;  // sum over applied rounds of their fresh ranks
  uint64_t rank_rounds = 0;          // sum over applied rounds of their ranks
  // staleness[a]: applied rounds whose oldest carried gradient was a rounds old (the last bin
  // counts everything older).
  std::vector<uint64_t> staleness = std::vector<uint64_t>(9, 0);
  std::chrono::nanoseconds computing{0};  // between step() calls (the application's work)
  std::chrono::nanoseconds waiting{0};    // blocked inside step() / finish() for rounds
  std::chrono::nanoseconds applying{0};   // applying results
  double momentum_sum = 0;                // sum over applied rounds of the momentum in force
  double lr_sum = 0;                      // sum over applied rounds of the rate in force
  double staleness_sum = 0;               // sum over applied rounds of their mean staleness

  // Mean fraction of ranks that were fresh in the applied rounds (`size`: for stats made before
  // rank_rounds was counted).
  double fresh_fraction(int size) const;
  // Mean and max of the per-round oldest staleness.
  double mean_staleness() const;
  // Rounds that were steps (held a gradient).
  uint64_t steps_applied() const { return rounds_applied - empty_rounds; }
  // Means over those: momentum and rate in force, staleness of the contributions.
  double mean_momentum() const { return steps_applied() ? momentum_sum / steps_applied() : 0; }
  double mean_lr() const { return steps_applied() ? lr_sum / steps_applied() : 0; }
  double mean_contribution_staleness() const {
    return steps_applied() ? staleness_sum / steps_applied() : 0;
  }
  int max_staleness() const;
};

class EagerSgd {
 public:
  // Collective over `comm`: every rank calls it with the same count and options.
  // `params` and `grads` are `count` floats the caller keeps alive for the object's lifetime.
  static Result<std::unique_ptr<EagerSgd>> create(Communicator& comm, float* params, float* grads,
                                                  size_t count, MemoryKind memory,
                                                  const SgdOptions& options);
  ~EagerSgd();
  EagerSgd(const EagerSgd&) = delete;
  EagerSgd& operator=(const EagerSgd&) = delete;

  // After the local backward pass: posts grads / P and applies completed rounds (see above).
  Status step();
  // Collective: flushes every carried gradient and applies the remaining rounds. step() may be
  // called again afterwards (a new phase, e.g. the next epoch).
  Status finish();

  const SgdStats& stats() const { return stats_; }
  // The averaged parameters (SgdOptions::average_decay; `count` floats, identical on every rank
  // after finish()), or null when none are kept. They start at the initial parameters.
  const float* averaged() const { return average_.empty() ? nullptr : average_.data(); }
  // Straggler attribution: every rank's lateness over the rounds applied so far (index: rank;
  // PartialAllreduce::lateness()).
  std::vector<RankLateness> lateness() const { return pa_->lateness(); }
  // Rounds applied so far (the model version): identical on every rank after finish().
  uint64_t version() const { return stats_.rounds_applied; }
  // The rate the next round is applied with (after the staleness rule, for kStep).
  double current_lr() const;
  // The momentum the next round is applied with (after the staleness rule).
  double current_momentum() const;
  const SgdOptions& options() const { return options_; }
  // on_failure=continue, after the application shrank the communicator itself (one of its own
  // collectives met the failure first): applies what completed and moves the rounds to the new
  // group now, meeting the survivors whose rounds met the failure (they wait for this rank's
  // account of the rounds before going on).
  Status rejoin() { return drain().status(); }
  // The group the rounds run over now (the survivors' after a failure survived).
  int rank() const { return pa_->rank(); }
  int size() const { return pa_->size(); }

 private:
  EagerSgd(const SgdOptions& options, float* params, float* grads, size_t count,
           std::unique_ptr<PartialAllreduce> pa);
  // Applies every round already complete; returns how many.
  Result<int> drain();
  void apply(const RoundResult& result);
  // kMomentum and kStep: the momentum follows the running staleness.
  bool lowers_momentum() const;
  // kStep: `rate` raised so that lr / (1 - mu) stays at the configured momentum's; else `rate`.
  double keep_total_step(double rate) const;

  SgdOptions options_;
  float* params_;
  float* grads_;
  size_t count_;
  std::unique_ptr<PartialAllreduce> pa_;
  std::vector<float> velocity_;
  std::vector<float> average_;
  SgdStats stats_;
  std::chrono::steady_clock::time_point last_return_;
  bool returned_once_ = false;
  uint64_t late_seen_ = 0;    // PartialStats late + dropped posts after the previous post
  double staleness_avg_ = 0;  // running mean staleness of the applied rounds (kMomentum)
};

}  // namespace eagercomm::sgd
