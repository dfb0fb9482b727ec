// The shared part of transport_contract_test (one program of several files: see
// tests/transport/transport_contract_test.cc): the backends the suite runs on, one rank's
// completions, posting that retries on kBusy, a rank polled from a thread of its own, the
// TransportContract fixture with its worlds of ranks, and the byte pattern the writes carry.
#pragma once

#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "collectives/config.h"
#include "runtime/store.h"
#include "tests/harness/thread_world.h"
#include "transport/registry.h"
#include "transport/transport.h"

namespace eagercomm::test::contract_test {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Kind = TransportCompletion::Kind;

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr int kSlowdown = 8;  // sanitizer builds: fewer iterations, the same checks
#else
inline constexpr int kSlowdown = 1;
#endif

// How long any one wait for the peers may take: generous, since the checks are about
// semantics and the machine may be small, loaded, and running a sanitizer.
inline constexpr auto kPatience = 60s;

// What a backend needs beyond the defaults to run its ranks in this process.
struct BackendSetup {
  const char* name;
  void (*adapt)(Config& config);
};
inline constexpr BackendSetup kSetups[] = {
    // No RDMA NIC in a test machine: the emulated device runs the real queue-pair code.
    {"verbs", [](Config& c) { c.verbs_emulate = true; }},
};

inline std::vector<std::string> registry_backends() {
  std::vector<std::string> names;
  for (const TransportInfo& info : list_transports()) names.push_back(info.name);
  return names;
}

inline std::string test_name_of(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

// One rank's completions, sorted by kind, in the order poll() returned them.
struct Completions {
  std::deque<TransportCompletion> notes;
  std::vector<TransportCompletion> done;
  std::vector<TransportCompletion> errors;
  size_t notes_before_error = SIZE_MAX;  // notifications polled before the first kPeerError

  // One poll() into a batch of `batch`: small batches end in the middle of a backend's queue.
  size_t poll(Transport& t, size_t batch = 7) {
    TransportCompletion buf[16];
    const size_t n = t.poll(std::span(buf, std::min(batch, std::size(buf))));
    for (size_t i = 0; i < n; ++i) {
      switch (buf[i].kind) {
        case Kind::kNotify:
          notes.push_back(buf[i]);
          break;
        case Kind::kWriteDone:
          done.push_back(buf[i]);
          break;
        case Kind::kPeerError:
          if (errors.empty()) notes_before_error = notes.size();
          errors.push_back(buf[i]);
          break;
      }
    }
    return n;
  }
};

// Calls `op` until it is not kBusy, polling `t` in between (the contract's "retry after
// poll()"); gives up after kPatience.
inline Status post(Transport& t, Completions& seen, const std::function<Status()>& op) {
  const auto deadline = Clock::now() + kPatience;
  for (;;) {
    Status s = op();
    if (s.code() != StatusCode::kBusy) return s;
    if (Clock::now() > deadline) return s;
    if (seen.poll(t) == 0) std::this_thread::yield();
  }
}

// Polls `t` on a thread of its own until stopped: a peer that keeps progressing, as a rank with
// its own progress thread does. What it saw is read under its lock, which also orders the
// reader after the poll() that saw a notification (and so after the data it announces).
class Poller {
 public:
  explicit Poller(Transport& t) : t_(t), thread_([this] { run(); }) {}
  ~Poller() { stop(); }
  void stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  // Waits until pred(what was seen) holds, kPatience at most.
  bool wait_for(const std::function<bool(const Completions&)>& pred) {
    const auto deadline = Clock::now() + kPatience;
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (pred(seen_)) return true;
      }
      if (Clock::now() > deadline) return false;
      std::this_thread::sleep_for(100us);
    }
  }
  Completions seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }

 private:
  void run() {
    while (!stop_.load()) {
      size_t n;
      {
        std::lock_guard<std::mutex> lock(mu_);
        n = seen_.poll(t_);
      }
      if (n == 0) t_.wait(1ms);
    }
  }
  Transport& t_;
  std::mutex mu_;
  Completions seen_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Keeps `t` progressing until all `ranks` arrived: a peer may still need this rank's poll()
// (ucx answers from it, verbs returns receive credits from it).
inline void poll_until_all_arrive(Transport& t, Completions& seen, std::atomic<int>& arrived,
                                  int ranks) {
  arrived.fetch_add(1);
  const auto deadline = Clock::now() + kPatience;
  while (arrived.load() < ranks && Clock::now() < deadline) {
    if (seen.poll(t) == 0) t.wait(1ms);
  }
  EXPECT_GE(arrived.load(), ranks) << "the other ranks did not finish";
}

// Refused with a message, and not kBusy (nothing to retry: the input is wrong).
inline void expect_refused(const Status& s, const std::string& what) {
  EXPECT_FALSE(s.ok()) << what << " was accepted";
  EXPECT_NE(s.code(), StatusCode::kBusy) << what;
  EXPECT_FALSE(s.message().empty()) << what << ": an error without a message";
}

// A bad remote key or address: the caller's or the peer's mistake, said as such.
inline void expect_bad_input(const Status& s, const std::string& what) {
  expect_refused(s, what);
  EXPECT_TRUE(s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kProtocolError)
      << what << ": " << s.to_string();
}

struct World {
  Config config;
  HashStore store;
  std::vector<std::unique_ptr<Transport>> t;
};

class TransportContract : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    for (const TransportInfo& info : list_transports()) {
      if (info.name == GetParam() && !info.compiled) {
        GTEST_SKIP() << "transport " << info.name << " is not built: " << info.reason;
      }
      // One simulated network per process, installed by a simulation: sim_test checks this
      // backend's contract on the event loop (SimTransportKeepsTheContract).
      if (info.name == GetParam() && info.name == "sim") {
        GTEST_SKIP() << "the sim transport runs inside a simulation (tests/sim/sim_test.cc)";
      }
    }
  }

  void TearDown() override {
    for (auto& w : worlds_) close_all(*w);
  }

  // Closes every transport of `w` at once, then destroys them: a closing rank may wait for its
  // peers' answers (ucx's goodbye handshake), which a peer that is closing too gives at once.
  static void close_all(World& w) {
    std::vector<std::thread> closers;
    for (auto& t : w.t) {
      if (t) closers.emplace_back([&t] { t->close(); });
    }
    for (std::thread& th : closers) th.join();
    for (auto& t : w.t) t.reset();
  }

  // A world of `size` ranks of this backend, every pair connected on both sides before any
  // traffic (what the contract asks of the bootstrap) unless `connect` is false. The first one
  // made is t(r); later ones are t(r, index).
  void make_world(int size, bool connect = true) {
    static int made = 0;
    auto w = std::make_unique<World>();
    w->config.timeout = kPatience;
    // Names of shared-memory objects derive from the job id: unique per world and process.
    w->config.job_id = "contract-" + std::to_string(getpid()) + "-" + std::to_string(made++);
    for (const BackendSetup& setup : kSetups) {
      if (GetParam() == setup.name) setup.adapt(w->config);
    }
    for (int r = 0; r < size; ++r) {
      TransportParams params{r, size, &w->config, &w->store, "contract", true};
      auto t = create_transport(GetParam(), params);
      ASSERT_TRUE(t.ok()) << "rank " << r << ": " << t.status().to_string();
      w->t.push_back(std::move(t).value());
    }
    World& world = *w;
    worlds_.push_back(std::move(w));
    if (!connect) return;
    for (int r = 0; r < size; ++r) {
      for (int p = 0; p < size; ++p) {
        if (p == r) continue;
        const Status s = world.t[r]->connect(p, world.t[p]->local_address());
        ASSERT_TRUE(s.ok()) << "rank " << r << " connecting to " << p << ": " << s.to_string();
      }
    }
  }

  Transport& t(int rank, size_t world = 0) { return *worlds_[world]->t[rank]; }
  std::unique_ptr<Transport>& owned(int rank, size_t world = 0) { return worlds_[world]->t[rank]; }
  int size(size_t world = 0) const { return static_cast<int>(worlds_[world]->t.size()); }

  // Polls every rank of the first world into `seen` until `done()` holds or kPatience passed.
  bool drive(std::vector<Completions>& seen, const std::function<bool()>& done) {
    seen.resize(size());
    const auto deadline = Clock::now() + kPatience;
    while (!done()) {
      if (Clock::now() > deadline) return false;
      size_t n = 0;
      for (int r = 0; r < size(); ++r) n += seen[r].poll(t(r));
      if (n == 0) std::this_thread::yield();
    }
    return true;
  }

  // post() for a test that drives every rank of the first world from one thread: retries on
  // kBusy while polling them all (a receiver's poll() may be what frees room: verbs credits).
  Status post_all(std::vector<Completions>& seen, const std::function<Status()>& op) {
    seen.resize(size());
    const auto deadline = Clock::now() + kPatience;
    for (;;) {
      Status s = op();
      if (s.code() != StatusCode::kBusy || Clock::now() > deadline) return s;
      size_t n = 0;
      for (int r = 0; r < size(); ++r) n += seen[r].poll(t(r));
      if (n == 0) std::this_thread::yield();
    }
  }

  // Every rank of the first world notifies every other once and polls until it heard from
  // all: the connections are up (a backend may connect in the background, answering kBusy and
  // leaving work for poll() meanwhile), for tests that measure what an idle transport does.
  void warm_up() {
    constexpr uint32_t kHello = 0xfffffff0u;
    std::vector<Completions> seen;
    for (int r = 0; r < size(); ++r) {
      for (int p = 0; p < size(); ++p) {
        if (p == r) continue;
        const Status s = post_all(seen, [&] { return t(r).notify(p, kHello); });
        ASSERT_TRUE(s.ok()) << "rank " << r << " to " << p << ": " << s.to_string();
      }
    }
    ASSERT_TRUE(drive(seen, [&] {
      for (int r = 0; r < size(); ++r) {
        if (seen[r].notes.size() < static_cast<size_t>(size() - 1)) return false;
      }
      return true;
    })) << "the ranks did not hear from each other";
    // What the connections still owe poll() (a last set-up event) is taken too.
    const auto linger = Clock::now() + 20ms;
    drive(seen, [&] { return Clock::now() > linger; });
    for (int r = 0; r < size(); ++r) {
      for (const TransportCompletion& c : seen[r].notes) EXPECT_EQ(c.tag, kHello);
      EXPECT_TRUE(seen[r].errors.empty());
    }
  }

  // A region of `bytes` allocated by `rank` and imported by `importer`.
  struct Shared {
    std::unique_ptr<MemoryRegion> local;
    std::unique_ptr<RemoteRegion> remote;
  };
  Shared share(int rank, int importer, size_t bytes) {
    Shared s;
    auto local = t(rank).allocate(bytes, MemoryKind::kHost);
    EXPECT_TRUE(local.ok()) << local.status().to_string();
    if (!local.ok()) return s;
    s.local = std::move(local).value();
    auto remote = t(importer).import_region(rank, s.local->remote_key());
    EXPECT_TRUE(remote.ok()) << remote.status().to_string();
    if (remote.ok()) s.remote = std::move(remote).value();
    return s;
  }

  std::vector<std::unique_ptr<World>> worlds_;
};

// Byte j of write k of `round` from `sender`: what every write of these checks carries.
inline uint8_t stream_byte(int sender, uint32_t round, size_t k, size_t j) {
  return static_cast<uint8_t>(sender * 131 + round * 71 + k * 29 + j * 7 + (j >> 8));
}

// The first byte of p[0, n) that is not write k's of `round` from `sender`, or n.
inline size_t first_wrong(const uint8_t* p, size_t n, int sender, uint32_t round, size_t k) {
  for (size_t j = 0; j < n; ++j) {
    if (p[j] != stream_byte(sender, round, k, j)) return j;
  }
  return n;
}

}  // namespace eagercomm::test::contract_test
