// Internal: what a PartialAllreduce holds (PartialAllreduce::Impl): the engine side of its rounds
// and what this rank's application has done with them. partial_allreduce.cc runs the calls;
// partial_recovery.cc continues through a failure (on_failure=continue). Not installed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/communicator_impl.h"
#include "collectives/engine/comm_core.h"
#include "collectives/partial/lateness_ledger.h"
#include "collectives/partial/partial_shared.h"
#include "collectives/partial/partial_stream.h"
#include "collectives/partial_allreduce.h"

namespace eagercomm {

// One incarnation's engine side: the communicator's engine it runs on, the state it shares with
// the application, its stream. A failure survived (on_failure=continue) replaces all three.
struct PartialAllreduce::Impl : detail::ContinuingObject {
  Impl(std::shared_ptr<detail::CommCore> core, std::shared_ptr<detail::PartialShared> shared)
      : core_(std::move(core)), shared_(std::move(shared)) {}
  // Hands `event` to the engine, waiting while its queue is full.
  void push_event(const detail::PartialEvent& event);
  // The next result to hand to the application, if one is ready (earlier incarnations' first).
  std::optional<RoundResult> take();
  // on_failure=continue: keeps a copy of `r` (`bytes` of data and metadata) in held_.
  void hold(const RoundResult& r, size_t bytes);
  void communicator_gone() override { comm_ = nullptr; }
  // How long wait() with kConfiguredTimeout and flush() without progress wait: EAGERCOMM_TIMEOUT,
  // twice that with on_failure=continue, so that a peer that stopped at the start of the wait
  // is declared hung (T after the last sign of life from it) and survived, before the wait
  // gives up.
  std::chrono::nanoseconds configured_wait() const {
    const std::chrono::nanoseconds t = core_->config().timeout;
    return comm_ != nullptr && t.count() > 0 && t < std::chrono::hours(24 * 365) ? 2 * t : t;
  }
  // Whether a failure of the current incarnation is one this object continues through.
  bool continues_after(const Status& failure) const;
  // on_failure=continue, once the current incarnation has failed (its results before the
  // failure are queued): shrinks the communicator (unless the application or another object of
  // it did), then takes every object of the communicator that continues over to the survivors:
  // agrees with them on the rounds and starts a new incarnation over them (partial_recovery.cc).
  // The error of a recovery that could not finish.
  Status recover();
  struct Recovery;
  Status stop(Communicator::Impl& ci, Recovery& rec);
  Status settle(Communicator::Impl& ci, Recovery& rec);
  Status restart(Communicator::Impl& ci, Recovery& rec);

  std::shared_ptr<detail::CommCore> core_;
  std::shared_ptr<detail::PartialShared> shared_;
  std::unique_ptr<detail::PartialStream> stream_;
  uint64_t consumed_ = 0;  // results of this incarnation taken: the model version posts build on
  uint64_t taken_ = 0;     // the global number of the next result to take (every incarnation)
  std::atomic<bool> posting_{false};
  uint64_t last_post_round_ = UINT64_MAX;  // the round this rank's latest post landed in
  uint64_t arrived_round_ = UINT64_MAX;    // the round wait() last announced arrival for
  std::string last_timeout_;               // the last wait()'s timeout, told to peers on destroy
  std::vector<uint8_t> device_stage_;      // a device gradient's host copy (post)
  // The application's compute before a post: from the end of this object's last post() or
  // wait() (not across a flush(), after which comes evaluation, not a step) to the next post().
  std::chrono::steady_clock::time_point idle_since_{};
  bool measure_next_ = false;
  std::unique_ptr<detail::LatenessLedger> ledger_;  // every rank's lateness (application thread)

  // Flushes: returned ones (over every incarnation), those done before this incarnation began
  // (its flush numbers start after them), the one in progress (0: none), and the global round
  // of the latest one that returned.
  uint64_t flushes_done_ = 0;
  uint64_t flush_base_ = 0;
  uint64_t flushing_ = 0;
  uint64_t last_flush_round_ = 0;
  // Set by flush() while its exchange (number `exchanging_flush_` of this incarnation) is
  // pending. A failure that comes only from peers that left after joining it (their flush
  // returned, so its round precedes the failure) is then no failure to continue through yet:
  // poll() returns it, and the flush finishes first. Otherwise, with on_failure=continue, a
  // survivor that finished its last flush and left would be taken for a dead rank, and the
  // ranks still flushing would shrink the group and flush again without it.
  uint64_t exchanging_flush_ = 0;
  bool flush_spares_failure() const {
    return exchanging_flush_ > 0 &&
           shared_->failure_spares_flush.load(std::memory_order_acquire) >= exchanging_flush_;
  }

  // ---- on_failure=continue (partial_recovery.cc) ----
  Communicator* comm_ = nullptr;  // shrunk after a failure; outlives the object
  uint32_t generation_ = 0;       // comm_->generation() this incarnation runs on
  uint64_t round_base_ = 0;       // the global number of this incarnation's round 0
  // Results of earlier incarnations not taken yet, in round order, and how many bytes (data and
  // metadata) each holds.
  struct Pending {
    RoundResult result;
    size_t bytes = 0;
  };
  std::deque<Pending> pending_;
  // Copies of the latest results taken (data and metadata), for survivors that missed them.
  struct Held {
    uint64_t round = 0;
    std::vector<uint8_t> bytes;
  };
  std::deque<Held> held_;
  // Set by a recovery that found the flush in progress here already returned on a survivor: its
  // round, which this rank's flush ends at.
  std::optional<uint64_t> resolved_flush_round_;
  PartialStats before_;  // the counters of earlier incarnations
};

}  // namespace eagercomm
