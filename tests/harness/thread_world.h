// Ranks as threads of this process (Gloo's thread-rank harness idea): World, communicators over
// the inproc transport; shm_world, communicators over the configured transport; Transports, bare
// inproc transports; run_threads, one thread per rank. Ranks as processes:
// tests/harness/process_world.h.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/config.h"
#include "runtime/store.h"
#include "transport/registry.h"

namespace eagercomm::test {

// Runs fn(rank) on one thread per rank and joins them.
inline void run_threads(int size, const std::function<void(int rank)>& fn) {
  std::vector<std::thread> threads;
  threads.reserve(size);
  for (int r = 0; r < size; ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

// A configuration for tests: the process one with `overrides` applied ("EAGERCOMM_SLOTS" ->
// "2"). Timeouts stay generous: tests check semantics, not speed.
inline Config test_config(const std::vector<std::pair<std::string, std::string>>& overrides = {}) {
  Result<Config> base = Config::from_environ();
  EXPECT_TRUE(base.ok()) << base.status().to_string();
  Config c = base.ok() ? base.value() : Config{};
  for (const auto& [name, value] : overrides) {
    Status s = c.set(name, value);
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  return c;
}

// Ranks as threads of this process over `config`'s transport (shm, ucx: what inproc does not
// exercise), bootstrapped through one in-memory store under `scope`. Null entries for ranks
// that failed to join (with a test failure).
inline std::vector<std::unique_ptr<Communicator>> shm_world(int size, const Config& config,
                                                            const std::string& scope) {
  HashStore store;
  std::vector<std::unique_ptr<Communicator>> comms(size);
  run_threads(size, [&](int r) {
    CommunicatorOptions opts;
    opts.config = &config;
    opts.scope = scope;
    auto c = Communicator::create(store, r, size, opts);
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    if (c.ok()) comms[r] = std::move(c).value();
  });
  return comms;
}

// Runs fn(comm) for every communicator of `comms` on a thread of its own and joins them.
inline void run_ranks(std::vector<std::unique_ptr<Communicator>>& comms,
                      const std::function<void(Communicator&)>& fn) {
  run_threads(static_cast<int>(comms.size()), [&](int r) { fn(*comms[r]); });
}

struct World {
  Config config;
  std::vector<std::unique_ptr<Communicator>> comms;

  static std::unique_ptr<World> make(int size, const Config& config) {
    auto w = std::make_unique<World>();
    w->config = config;
    CommunicatorOptions opts;
    opts.config = &w->config;
    auto comms = make_inproc_world(size, opts);
    EXPECT_TRUE(comms.ok()) << comms.status().to_string();
    if (comms.ok()) w->comms = std::move(comms).value();
    return w;
  }
  int size() const { return static_cast<int>(comms.size()); }
  Communicator& operator[](int r) { return *comms[r]; }

  // Runs fn(rank, comm) on one thread per rank and joins them.
  void run(const std::function<void(int, Communicator&)>& fn) {
    run_threads(size(), [&](int r) { fn(r, *comms[r]); });
  }

  // Runs fn(comm) on one thread per rank, each rank checking its own results (the cases of
  // tests/collectives/collective_cases.h). A rank that returns with a failure recorded aborts
  // every communicator: its peers, waiting for it in a collective, fail now instead of at the
  // timeout.
  void run_each(const std::function<void(Communicator&)>& fn) {
    run_threads(size(), [&](int r) {
      fn(*comms[r]);
      if (::testing::Test::HasFailure()) {
        for (auto& c : comms) c->abort("another rank failed the test");
      }
    });
  }
};

// The inproc transports of a small world, made through a shared store (one thread per rank).
struct Transports {
  Config config;
  HashStore store;
  std::vector<std::unique_ptr<Transport>> t;

  explicit Transports(int size, const std::string& scope = "tp") {
    t.resize(size);
    run_threads(size, [&](int r) {
      TransportParams p{r, size, &config, &store, scope};
      auto made = create_transport("inproc", p);
      ASSERT_TRUE(made.ok()) << made.status().to_string();
      t[r] = std::move(made).value();
    });
  }
  Transport& operator[](int r) { return *t[r]; }
};

}  // namespace eagercomm::test
