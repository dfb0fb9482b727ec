#include "sim/sim_world.h"

#include <algorithm>

#include <thread>

#include "collectives/communicator_impl.h"
#include "collectives/engine/comm_core.h"
#include "runtime/store.h"

namespace eagercomm::sim {

Result<std::unique_ptr<SimWorld>> SimWorld::create(const WorldOptions& options) {
  if (options.ranks < 1) {
    return make_status(StatusCode::kInvalidArgument, "sim: a world of %d ranks", options.ranks);
  }
  std::map<std::string, std::string> env = options.config;
  env["EAGERCOMM_TRANSPORT"] = "sim";
  env["EAGERCOMM_PROGRESS_THREAD"] = "off";
  // Setup runs one thread per rank on the real clock: with hundreds of ranks on a few cores
  // the collectives of a partial object's creation wait seconds, past the 50 ms default, and
  // probe all their peers, P^2 messages that touch a control slot of every pair (0.9 of the
  // 1.1 GB that creating P = 512 objects took; 8.6 GB at P = 1024 with a 1 s wait). Unless the
  // caller says otherwise, large worlds probe after a minute (a mismatch is still found).
  if (options.ranks > 64) env.try_emplace("EAGERCOMM_PROBE_AFTER", "60s");
  EC_ASSIGN_OR_RETURN(Config config, Config::load(env));
  std::unique_ptr<SimWorld> world(new SimWorld());
  world->config_ = config;
  world->network_ = std::make_unique<SimNetwork>(options.ranks, options.link, options.elide_bytes);
  EC_RETURN_IF_ERROR(world->network_->install());

  // The real bootstrap, one thread per rank (every rank waits for the others to join).
  HashStore store;
  CommunicatorOptions copts;
  copts.config = &world->config_;
  copts.scope = "sim";
  copts.in_process = true;
  const int P = options.ranks;
  std::vector<Result<std::unique_ptr<Communicator>>> made;
  made.reserve(P);
  for (int r = 0; r < P; ++r) made.emplace_back(Status(StatusCode::kInternal, "not created"));
  std::vector<std::thread> threads;
  threads.reserve(P);
  for (int r = 0; r < P; ++r) {
    threads.emplace_back([&, r] { made[r] = Communicator::create(store, r, P, copts); });
  }
  for (auto& t : threads) t.join();
  for (auto& m : made) {
    if (!m.ok()) return m.status();
    world->comms_.push_back(std::move(m).value());
  }
  world->settle();
  return world;
}

SimWorld::~SimWorld() {
  // Destruction runs on the real clock (no loop): the communicators' bounded waits for their
  // last notices must end.
  comms_.clear();
  if (network_) network_->uninstall();
}

void SimWorld::settle() {
  for (int pass = 0; pass < 10000; ++pass) {
    bool any = false;
    for (int r = 0; r < size(); ++r) {
      Engine& engine = Communicator::Impl::of(*comms_[r]).core->engine();
      while (engine.try_progress() > 0) any = true;
    }
    if (!any && network_->queued_completions() == 0) return;
  }
}

void SimWorld::progress(int rank) {
  detail::CommCore& core = *Communicator::Impl::of(*comms_[rank]).core;
  Engine& engine = core.engine();
  for (int pass = 0; pass < 1024 && engine.try_progress() > 0; ++pass) {
  }
  engine.run_exclusive([&] { core.block(std::chrono::nanoseconds::max()); });
}

uint32_t SimWorld::most_connections() {
  uint32_t most = 0;
  for (auto& comm : comms_) most = std::max(most, comm->stats().connected_peers);
  return most;
}

}  // namespace eagercomm::sim
