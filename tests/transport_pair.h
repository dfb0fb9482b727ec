// Test helper: the inproc transports of a small world, made through a shared store.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "collectives/config.h"
#include "runtime/store.h"
#include "transport/registry.h"

namespace eagercomm::test {

struct Transports {
  Config config;
  HashStore store;
  std::vector<std::unique_ptr<Transport>> t;

  explicit Transports(int size, const std::string& scope = "tp") {
    t.resize(size);
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r) {
      threads.emplace_back([&, r] {
        TransportParams p{r, size, &config, &store, scope};
        auto made = create_transport("inproc", p);
        ASSERT_TRUE(made.ok()) << made.status().to_string();
        t[r] = std::move(made).value();
      });
    }
    for (auto& th : threads) th.join();
  }
  Transport& operator[](int r) { return *t[r]; }
};

}  // namespace eagercomm::test
