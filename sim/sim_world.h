// A simulated job (issue 21): P communicators of the real library, one process, one event loop.
//
// SimWorld makes a SimNetwork (transport/sim/sim_network.h), installs it, and creates one
// Communicator per rank over the `sim` transport, with the real bootstrap through an in-process
// store (one thread per rank, on the real clock: nothing is timed yet). Afterwards everything
// runs on the caller's thread inside SimNetwork::run(): a RankDriver starts operations with the
// non-blocking API and calls progress(rank), which runs the rank's real engine (CommCore, the
// collective state machines, the mailbox) for whatever is ready and asks the loop to come back
// at the rank's next timer. Configuration: EAGERCOMM_TRANSPORT=sim and no progress thread (the
// loop drives every rank), EAGERCOMM_PROBE_AFTER=60s above 64 ranks (sim_world.cc), plus what
// WorldOptions::config sets.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/communicator.h"
#include "transport/sim/sim_network.h"

namespace eagercomm::sim {

struct WorldOptions {
  int ranks = 4;
  LogGP link;
  uint64_t elide_bytes = UINT64_MAX;          // payloads above this are not copied
  std::map<std::string, std::string> config;  // EAGERCOMM_* settings for every rank
};

class SimWorld {
 public:
  // Runs fn(rank) on one thread per rank and joins them: for what is collective outside the loop
  // (creating and destroying partial objects, flushes), on the real clock.
  template <typename Fn>
  void on_every_rank(Fn fn) {
    std::vector<std::thread> threads;
    threads.reserve(comms_.size());
    for (int r = 0; r < size(); ++r) threads.emplace_back([&fn, r] { fn(r); });
    for (auto& t : threads) t.join();
  }

  static Result<std::unique_ptr<SimWorld>> create(const WorldOptions& options);
  ~SimWorld();
  SimWorld(const SimWorld&) = delete;
  SimWorld& operator=(const SimWorld&) = delete;

  int size() const { return static_cast<int>(comms_.size()); }
  SimNetwork& network() { return *network_; }
  Communicator& comm(int rank) { return *comms_[rank]; }
  const Config& config() const { return config_; }
  // One turn of `rank`'s engine at the current virtual time: every event that is ready, then a
  // wake-up request for the rank's next timer (probes, room polls). For RankDriver::run.
  void progress(int rank);
  // Outside the loop, after what the ranks' threads did (creating communicators and objects):
  // runs every rank's engine until nothing is left to deliver or return (credits), so that a
  // timed run starts from the same state whatever order the threads ran in.
  void settle();
  // The most transport connections a rank holds now (CommunicatorStats::connected_peers).
  uint32_t most_connections();

 private:
  SimWorld() = default;
  std::unique_ptr<SimNetwork> network_;
  Config config_;
  std::vector<std::unique_ptr<Communicator>> comms_;
};

// Runs every rank's engine whenever the loop hands it a turn, and nothing else: lets what is in
// flight arrive (no new operations) before the objects are flushed or destroyed outside the loop.
class QuietDriver final : public RankDriver {
 public:
  explicit QuietDriver(SimWorld& world) : world_(world) {}
  void run(int rank) override { world_.progress(rank); }

 private:
  SimWorld& world_;
};

}  // namespace eagercomm::sim
