// Internal: heartbeats, and the watchdog that declares silent peers hung. Not installed.
//
// A rank whose process stops (SIGSTOP, a debugger, a host that froze or lost its link) neither
// dies nor closes a connection, so neither liveness beacons nor the transport notice it. Every
// interval the watchdog thread makes the engine's driver run duty(): send each watched peer a
// notification carrying how many collectives this rank has begun, and look at what it heard:
// any notification counts (heard()), so a busy pair adds nothing but a counter increment per
// notification. A watched peer silent for hang_after (EAGERCOMM_TIMEOUT, at least three
// intervals) is declared hung: the owner's on_hung fails every operation that needs it and
// passes the verdict on, and the peer is told (should it run again, its own operations fail the
// same way instead of waiting for peers that gave up on it). The watchdog thread drives only
// when nobody else does, so a rank whose application computes outside eagercomm still answers;
// it never waits for the driver token.
//
// Watched peers are the data partners (data_partners(): r +- 2^k and the recursive-doubling
// partners, O(log P), a symmetric relation whose graph contains the ring): every rank is
// watched by its partners, and a rank beats O(log P) peers per interval instead of P - 1 (issue
// 21: resources that grow with the algorithms). Ranks that do not watch a hung peer learn of it
// from the verdict its watchers pass along the partner graph (ControlKind::kHung); the reports
// below cover the watched peers only.
//
// Thread-safety: start() and stop() from the owner; heard(), duty(), on_heartbeat() from the
// current engine driver; silent_report() and late_report() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/config.h"
#include "collectives/engine/failure_state.h"
#include "runtime/engine.h"
#include "runtime/status.h"
#include "transport/mailbox.h"

namespace eagercomm::detail {

class LivenessWatchdog {
 public:
  // Called by the driver for a peer silent for hang_after, before it is told so.
  using OnHung = std::function<void(int peer, const Status& why)>;

  // `gone`: the peers no beat goes to and none is judged; owned by the same communicator.
  LivenessWatchdog(int rank, int size, const Config& config, const GonePeers& gone, OnHung on_hung);
  ~LivenessWatchdog() { stop(); }
  LivenessWatchdog(const LivenessWatchdog&) = delete;
  LivenessWatchdog& operator=(const LivenessWatchdog&) = delete;

  // Starts the beats and the thread, unless heartbeats are off: EAGERCOMM_HEARTBEAT=0,
  // EAGERCOMM_TIMEOUT=0 ("wait forever"), one rank, or ranks that share one process (its
  // threads cannot stop one by one).
  void start(Engine& engine, Mailbox& mailbox, bool ranks_share_process);
  // Joins the thread; idempotent.
  void stop();
  bool on() const { return interval_ != std::chrono::nanoseconds::zero(); }
  // The peers this rank beats and judges (sorted; the same set whether heartbeats are on or
  // not): also the ones a hung verdict is passed on to.
  const std::vector<int>& watched() const { return watched_; }

  // Driver: a notification from `peer` arrived.
  void heard(int peer) { ++heard_[peer]; }
  // Driver: whether a duty is due (set by the thread, cleared by duty()).
  bool duty_due() const { return duty_due_.load(std::memory_order_relaxed); }
  // Driver: sends this period's heartbeats (carrying `begun`, the collectives this rank has
  // begun) and declares silent peers hung.
  void duty(uint64_t begun);
  // Driver: `peer`'s heartbeat says it has begun `begun` collectives.
  void on_heartbeat(int peer, uint64_t begun) {
    peer_begun_[peer].store(begun, std::memory_order_relaxed);
  }

  // "; silent ranks: rank 2 (nothing heard for 3.1s)" for watched peers whose heartbeats
  // stopped coming, or "" (none, or heartbeats off).
  std::string silent_report() const;
  // "rank 1 (alive, last started #4), rank 3 (...)": the watched peers heard from lately that
  // had not begun collective `seq` by their last heartbeat ("" when none; heartbeats must be
  // on).
  std::string late_report(uint64_t seq) const;

 private:
  void thread_main();
  // How old a peer's last heartbeat may be in a report that calls it alive. peer_heard_ns_ is
  // stamped at the receiver's duty, not on arrival, so a live peer's age reaches two intervals
  // whenever a beat lands just after a duty; a third absorbs scheduling delay on a loaded host
  // (a live straggler was once called silent at 1.0 s with 0.5 s beats).
  int64_t silent_after_ns() const { return 3 * interval_.count(); }

  const int rank_;
  const int size_;
  const Config& config_;
  const GonePeers& gone_;
  const OnHung on_hung_;
  const std::vector<int> watched_;
  Engine* engine_ = nullptr;    // set by start()
  Mailbox* mailbox_ = nullptr;  // set by start()

  std::chrono::nanoseconds interval_{0};             // 0: heartbeats off
  std::chrono::nanoseconds hang_after_{0};           // silence that makes a peer hung
  std::atomic<bool> duty_due_{false};                // set by the thread, cleared by the driver
  std::vector<uint32_t> heard_;                      // driver: notifications received per peer
  std::vector<uint32_t> heard_seen_;                 // driver: heard_ at the last duty
  std::vector<Engine::Clock::time_point> heard_at_;  // driver: when heard_ last changed
  Engine::Clock::time_point last_duty_at_;           // driver
  // For the reports on any thread: steady-clock ns a peer was last heard at, and how many
  // collectives it had begun by its last heartbeat.
  std::unique_ptr<std::atomic<int64_t>[]> peer_heard_ns_;
  std::unique_ptr<std::atomic<uint64_t>[]> peer_begun_;

  std::thread thread_;
  std::mutex mu_;  // the thread's sleep only
  std::condition_variable cv_;
  bool stop_ = false;
};

}  // namespace eagercomm::detail
