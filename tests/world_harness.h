// Test harness: ranks as threads over an in-process world (Gloo's thread-rank harness idea).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/config.h"
#include "runtime/store.h"

namespace eagercomm::test {

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
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      CommunicatorOptions opts;
      opts.config = &config;
      opts.scope = scope;
      auto c = Communicator::create(store, r, size, opts);
      EXPECT_TRUE(c.ok()) << c.status().to_string();
      if (c.ok()) comms[r] = std::move(c).value();
    });
  }
  for (auto& t : threads) t.join();
  return comms;
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
    std::vector<std::thread> threads;
    for (int r = 0; r < size(); ++r) threads.emplace_back([&, r] { fn(r, *comms[r]); });
    for (auto& t : threads) t.join();
  }
};

}  // namespace eagercomm::test
