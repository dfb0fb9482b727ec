// The `sim` backend: every rank of a job in one process, one event loop, a virtual clock.
//
// A SimNetwork is the fabric of one simulated job. Its transports (one per rank, made by the
// registry as "sim" while the network is installed: SimNetwork::install()) implement the
// transport contract over an event queue ordered by virtual time: write() charges the LogGP
// costs (loggp.h) and schedules the delivery, at which the bytes are copied and the peer's
// notification queued; the sender's kWriteDone comes L after the delivery (the acknowledgement).
// wait() does not block: it asks the loop to run the rank again at the end of its timeout, so the
// runtime's own timers (probes, room polls, timeouts) fire in virtual time.
//
// The loop (run()) pops the earliest event, moves the clock to its time and hands every rank that
// has something to do (completions, a wake-up it asked for, a timer of its driver) to the
// caller's RankDriver, in rank order. Nothing else runs meanwhile, so a run is a function of
// its inputs: the same seed gives the same run, bit for bit. The network is the process's clock
// while the loop runs (runtime/clock.h).
//
// Payloads: writes above `elide_bytes` are not copied (their time is charged): for sizes whose
// buffers would not fit in memory P times over, when only the time matters.
//
// Outside run() the network is in setup: communicators and partial objects are being made by one
// thread per rank, on the real clock, and their creation runs collectives. There it delivers at
// once (copy, notification, write completion) under a mutex, and wait() blocks on a condition
// variable, like an in-process transport; nothing is timed. Inside run() everything happens on
// the loop's thread and nothing blocks.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <queue>
#include <random>
#include <unordered_map>
#include <vector>

#include "runtime/clock.h"
#include "runtime/status.h"
#include "transport/registry.h"
#include "transport/sim/loggp.h"
#include "transport/transport.h"

namespace eagercomm::sim {

// What the loop calls for a rank that has something to do at the current virtual time.
class RankDriver {
 public:
  virtual ~RankDriver() = default;
  virtual void run(int rank) = 0;
};

struct NetworkStats {
  uint64_t messages = 0;  // writes and notifications
  uint64_t bytes = 0;     // written payload bytes
  uint64_t events = 0;    // events the loop handled
};

class SimNetwork final : public VirtualClock {
 public:
  SimNetwork(int size, const LogGP& model, uint64_t elide_bytes = UINT64_MAX);
  ~SimNetwork() override;
  SimNetwork(const SimNetwork&) = delete;
  SimNetwork& operator=(const SimNetwork&) = delete;

  int size() const { return size_; }
  const LogGP& model() const { return model_; }
  uint64_t elide_bytes() const { return elide_bytes_; }
  // What an elided write still delivers: its first page, where the mailbox's slot header and
  // the collective's message header are (a slot's payload follows them).
  static constexpr size_t kElidedKeepBytes = 4096;
  // Virtual nanoseconds since the network was made.
  int64_t now_ns() const { return now_ns_; }
  std::chrono::steady_clock::time_point now() const override {
    return base_ + std::chrono::nanoseconds(now_ns_);
  }

  // Makes the registry's "sim" transports belong to this network until uninstall(). One network
  // at a time per process: kUnavailable while another is installed.
  Status install();
  void uninstall();

  // Runs `rank`'s driver at virtual time `at_ns` (the drivers' own timers: compute, delays).
  void schedule_run(int rank, int64_t at_ns);
  // Charges `rank`'s CPU `ns` from now on (compute it does between its calls): its
  // notifications wait until it is free, as a busy application thread's would.
  void busy(int rank, int64_t ns);
  // `rank`'s runtime handed `bytes` of a received payload to the operation that reduces or
  // copies them (Transport::took_in): its CPU pays the model's reduction for them now.
  void took_in(int rank, size_t bytes);
  // When `rank`'s CPU is done reducing what its runtime took in so far (now, or later: reductions
  // charged during its turn end after it). A driver that times when a rank's call completed reads
  // this, not now_ns(): the call's last reduction (or copy) is part of it, whereas what the rank
  // sends afterwards in the same turn (credits) is not.
  int64_t reduced_by(int rank) const { return std::max(now_ns_, ranks_[rank].reduced_until); }
  int64_t cpu_free_ns(int rank) const { return ranks_[rank].cpu_free; }

  // Runs the loop until no event is left, `stop()` holds, or virtual time passes `until_ns`.
  // Returns whether it stopped because of `stop`.
  template <typename Stop>
  bool run(RankDriver& driver, Stop stop, int64_t until_ns = INT64_MAX) {
    ScopedVirtualClock clock(*this);
    timed_ = true;
    bool stopped = true;
    while (!stop()) {
      if (!step(driver, until_ns)) {
        stopped = stop();
        break;
      }
    }
    timed_ = false;
    return stopped;
  }

  // What a run may vary within the transport contract (the schedule explorer's knobs,
  // sim/explorer.h): every message arrives up to `jitter_ns` later than the model says (per-pair
  // order is kept, so only messages of different pairs overtake each other), and ranks that are
  // runnable at one instant run in an order drawn from `seed` instead of rank order. The draws
  // come from `seed`: the same seed gives the same run.
  struct Perturbation {
    uint64_t seed = 0;
    int64_t jitter_ns = 0;
    bool shuffle = false;
    // Outside the contract, to show that the explorer notices broken deliveries: from the n-th
    // payload delivered on (1-based; 0: never), payloads arrive with their middle byte changed.
    uint64_t corrupt_from = 0;
  };
  void perturb(const Perturbation& p);

  // Inside run(): `rank`'s process dies now. Its driver never runs again and nothing more reaches
  // it (messages in flight to it are lost; those it sent still arrive); `detect_ns` later every
  // live peer's transport reports it lost (kPeerError), as a broken connection would, and writes
  // to it fail from then on (before that they are accepted and lost, and never complete).
  void kill(int rank, int64_t detect_ns);
  bool dead(int rank) const { return ranks_[rank].dead; }
  // `rank` closed its transport (left the job) and did not die.
  bool left(int rank) const;
  // Why a rank lost `peer`: kPeerFailed naming when it died (for SimTransport::peer_error).
  Status peer_error(int peer) const;
  // Deliveries and local completions scheduled and not handled yet (wake-ups not counted).
  uint64_t in_flight() const { return in_flight_; }

  const NetworkStats& stats() const { return stats_; }
  // Writes a line per message sent and per event handled to `out` (null: none), for following a
  // run step by step: "<ns> send <src> -> <dst> <bytes>B tag 0x<tag> arrives <ns>", "<ns> deliver
  // <src> -> <dst> tag 0x<tag>", "<ns> done <rank>", "<ns> wake <rank>", "<ns> run <rank>",
  // "<ns> busy <rank> until <ns>".
  void set_trace(std::FILE* out) { trace_ = out; }
  // Completions delivered and not polled yet, over all ranks (setup: SimWorld::settle()).
  size_t queued_completions() const;

  // ---- for SimTransport ----
  struct Region {
    uint8_t* data = nullptr;
    size_t size = 0;
  };
  uint32_t add_region(int rank, uint8_t* data, size_t size);
  Result<Region> region(int rank, uint32_t id) const;
  void drop_region(int rank, uint32_t id);
  Status write(int src, int dst, const uint8_t* from, uint8_t* to, size_t bytes, uint32_t tag,
               uint64_t cookie, bool signal_done);
  // A transport's wait(): in run(), a wake-up request at the end of `timeout`; in setup, a
  // blocking wait for a completion or wake().
  void wait(int rank, std::chrono::nanoseconds timeout);
  void wake(int rank);
  void wake_at(int rank, int64_t at_ns);
  size_t poll(int rank, std::span<TransportCompletion> out);
  void close(int rank);

 private:
  enum class Kind : uint8_t { kDeliver, kLocal, kWake, kDriver };
  struct Event {
    int64_t at;
    uint64_t seq;  // ties keep the order they were made in
    Kind kind;
    int rank;
    TransportCompletion completion;
    const uint8_t* from;
    uint8_t* to;
    size_t bytes;
    bool operator>(const Event& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };
  struct Rank {
    std::deque<TransportCompletion> completions;
    int64_t cpu_free = 0;  // its CPU is busy until then
    // When its CPU has taken in the first message that arrived since it last ran: it acts then,
    // on every message that arrived by then (those taken in after it are charged before what
    // it sends, and are seen again at its next turn).
    int64_t acts_at = INT64_MAX;
    int64_t reduced_until = 0;  // the end of its last took_in() charge
    int64_t tx_free = 0;        // its NIC sends the next message from then
    // When its NIC takes in the bytes of messages already scheduled (start -> end, disjoint,
    // none over before now): a message scheduled later may still arrive earlier, in a gap.
    std::map<int64_t, int64_t> rx_busy;
    std::unordered_map<int, int64_t> last_arrival;  // per peer: its last message\'s arrival
    int64_t wake_at = INT64_MAX;                    // the earliest wake-up scheduled
    bool closed = false;
    bool dead = false;
    int64_t died_at = 0;
    int64_t lost_after = 0;  // dead: writes to it fail from then on
    bool runnable = false;
    std::vector<Region> regions;
  };

  void push(Event e);
  bool step(RankDriver& driver, int64_t until_ns);
  // Books `wire` ns of `d`'s receiving link for bytes that reach it at `reach`: the first gap
  // from then on. Returns when the last byte is in.
  int64_t book_rx(Rank& d, int64_t reach, int64_t wire);

  const int size_;
  const LogGP model_;
  const uint64_t elide_bytes_;
  const std::chrono::steady_clock::time_point base_;
  int64_t now_ns_ = 0;
  uint64_t seq_ = 0;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  std::vector<Rank> ranks_;
  std::vector<int> runnable_;
  bool timed_ = false;           // inside run()
  mutable std::mutex setup_mu_;  // regions, and everything else in setup
  std::vector<std::unique_ptr<std::condition_variable>> setup_cv_;  // per rank, in setup
  std::vector<uint8_t> setup_woken_;
  NetworkStats stats_;
  std::FILE* trace_ = nullptr;
  Perturbation perturb_;
  std::mt19937_64 rng_;
  uint64_t in_flight_ = 0;
  uint64_t payloads_delivered_ = 0;
};

Result<std::unique_ptr<Transport>> create_sim_transport(const TransportParams& params);
// The installed network, or null (then "sim" is not available).
SimNetwork* installed_network();

}  // namespace eagercomm::sim
