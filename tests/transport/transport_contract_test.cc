// The transport contract (transport/transport.h) checked on every backend the registry knows,
// each backend's ranks as transports of this process (threads where the check needs them):
// writes and notifications delivered after their data and in per-pair order, one kWriteDone per
// write and none for notify(), back-pressure that loses and repeats nothing, wait() that never
// sleeps through a notification or a wake(), stores through mapped memory, zero-filled and
// importable regions, bad keys / addresses / offsets refused, and close().
//
// The backends are the registry's own list (list_transports()), so a new backend is checked as
// soon as it is registered; one that needs something to run here gets a line in kSetups. A
// backend not built into this library is skipped, naming why; one that is built must work.
//
// Backend-specific behaviour stays in the backends' own tests
// (tests/transport/shm_transport_test.cc, tests/transport/ucx_transport_test.cc,
// tests/transport/inproc_transport_test.cc, tests/transport/verbs_emulated_test.cc): key formats,
// segment cleanup, corrupt rings, UCX over TCP and between processes, timings.
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

namespace eagercomm::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Kind = TransportCompletion::Kind;

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int kSlowdown = 8;  // sanitizer builds: fewer iterations, the same checks
#else
constexpr int kSlowdown = 1;
#endif

// How long any one wait for the peers may take: generous, since the checks are about
// semantics and the machine may be small, loaded, and running a sanitizer.
constexpr auto kPatience = 60s;

// What a backend needs beyond the defaults to run its ranks in this process.
struct BackendSetup {
  const char* name;
  void (*adapt)(Config& config);
};
constexpr BackendSetup kSetups[] = {
    // No RDMA NIC in a test machine: the emulated device runs the real queue-pair code.
    {"verbs", [](Config& c) { c.verbs_emulate = true; }},
};

std::vector<std::string> registry_backends() {
  std::vector<std::string> names;
  for (const TransportInfo& info : list_transports()) names.push_back(info.name);
  return names;
}

std::string test_name_of(const ::testing::TestParamInfo<std::string>& info) {
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
Status post(Transport& t, Completions& seen, const std::function<Status()>& op) {
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
void poll_until_all_arrive(Transport& t, Completions& seen, std::atomic<int>& arrived, int ranks) {
  arrived.fetch_add(1);
  const auto deadline = Clock::now() + kPatience;
  while (arrived.load() < ranks && Clock::now() < deadline) {
    if (seen.poll(t) == 0) t.wait(1ms);
  }
  EXPECT_GE(arrived.load(), ranks) << "the other ranks did not finish";
}

// Refused with a message, and not kBusy (nothing to retry: the input is wrong).
void expect_refused(const Status& s, const std::string& what) {
  EXPECT_FALSE(s.ok()) << what << " was accepted";
  EXPECT_NE(s.code(), StatusCode::kBusy) << what;
  EXPECT_FALSE(s.message().empty()) << what << ": an error without a message";
}

// A bad remote key or address: the caller's or the peer's mistake, said as such.
void expect_bad_input(const Status& s, const std::string& what) {
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

// ---- writes then notifications: data first, per-pair order ----

// Sizes of one round of writes: 0, one byte, up to and just past verbs' inline limit (64 B),
// a page, 1 MiB, odd sizes at odd offsets.
constexpr size_t kStreamSizes[] = {1, 0, 64, 65, 4096, size_t{1} << 20, 8, 0, 100, 8195};
constexpr uint32_t kStreamWrites = std::size(kStreamSizes);
constexpr size_t stream_offset(size_t k) {
  size_t off = 0;
  for (size_t i = 0; i < k; ++i) off += kStreamSizes[i];
  return off;
}
constexpr size_t kStreamSpan = stream_offset(kStreamWrites);

uint8_t stream_byte(int sender, uint32_t round, size_t k, size_t j) {
  return static_cast<uint8_t>(sender * 131 + round * 71 + k * 29 + j * 7 + (j >> 8));
}

// The first byte of p[0, n) that is not write k's of `round` from `sender`, or n.
size_t first_wrong(const uint8_t* p, size_t n, int sender, uint32_t round, size_t k) {
  for (size_t j = 0; j < n; ++j) {
    if (p[j] != stream_byte(sender, round, k, j)) return j;
  }
  return n;
}

// Tag layout of the stream: bits 31..30 what, 29..16 the round, 15..0 the write.
enum : uint32_t { kData = 0, kMarker = 1, kAck = 2 };
uint32_t stream_tag(uint32_t what, uint32_t round, uint32_t k) {
  return (what << 30) | (round << 16) | k;
}

// Every rank streams rounds of writes to every other, each write followed by a notify() (the
// marker), and checks what it receives: a write's bytes are in place when its tag arrives and
// still when the marker after it does; tags from one sender arrive in the order posted, writes
// and notifications alike; every write completes once. A sender refills its source only after
// the round's kWriteDone (an early one shows as the next round's bytes at the target) and
// rewrites the target only after the target acknowledged the round.
TEST_P(TransportContract, WritesAreVisibleWhenTheirTagsArriveInPairOrder) {
  constexpr int kRanks = 3;
  const uint32_t rounds = kSlowdown > 1 ? 2 : 4;
  ASSERT_NO_FATAL_FAILURE(make_world(kRanks));
  // Rank r's source: one stream area per destination; its inbox: one area per sender.
  std::vector<std::unique_ptr<MemoryRegion>> src(kRanks), inbox(kRanks);
  std::vector<std::vector<std::unique_ptr<RemoteRegion>>> remote(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    auto s = t(r).allocate(kRanks * kStreamSpan, MemoryKind::kHost);
    auto in = t(r).allocate(kRanks * kStreamSpan, MemoryKind::kHost);
    ASSERT_TRUE(s.ok() && in.ok()) << s.status().to_string() << in.status().to_string();
    src[r] = std::move(s).value();
    inbox[r] = std::move(in).value();
  }
  for (int r = 0; r < kRanks; ++r) {
    remote[r].resize(kRanks);
    for (int p = 0; p < kRanks; ++p) {
      if (p == r) continue;
      auto imported = t(r).import_region(p, inbox[p]->remote_key());
      ASSERT_TRUE(imported.ok()) << imported.status().to_string();
      remote[r][p] = std::move(imported).value();
    }
  }
  std::atomic<bool> failed{false};
  std::atomic<int> finished{0};
  run_threads(kRanks, [&](int r) {
    Transport& me = t(r);
    Completions seen;
    struct Peer {
      uint32_t send_round = 0, send_op = 0;  // op 2k: write k, op 2k+1: its marker
      uint32_t acks = 0;                     // rounds the peer acknowledged
      uint32_t recv_round = 0, recv_op = 0;  // what comes next from the peer
      std::deque<uint32_t> acks_due;         // rounds to acknowledge to the peer
      std::vector<uint32_t> writes_done;     // kWriteDone per round
      std::vector<bool> done_once;           // per (round, write)
    };
    std::vector<Peer> peers(kRanks);
    for (Peer& p : peers) {
      p.writes_done.assign(rounds, 0);
      p.done_once.assign(rounds * kStreamWrites, false);
    }
    auto* source = static_cast<uint8_t*>(src[r]->data());
    const auto* in = static_cast<const uint8_t*>(inbox[r]->data());
    // Records a failure and stops every rank; false, for the callers to return.
    auto fail = [&](const std::string& why) {
      ADD_FAILURE() << "rank " << r << ": " << why;
      failed.store(true);
      return false;
    };
    auto complete = [&] {
      for (int p = 0; p < kRanks; ++p) {
        if (p == r) continue;
        const Peer& s = peers[p];
        if (s.send_round < rounds || s.acks < rounds || s.recv_round < rounds ||
            !s.acks_due.empty() || s.writes_done[rounds - 1] < kStreamWrites) {
          return false;
        }
      }
      return true;
    };
    // Posts what may go to `p` now; false on an error.
    auto send_to = [&](int p) {
      Peer& s = peers[p];
      while (!s.acks_due.empty()) {
        const Status st = me.notify(p, stream_tag(kAck, s.acks_due.front(), 0));
        if (st.code() == StatusCode::kBusy) return true;
        if (!st.ok()) return fail("ack: " + st.to_string());
        s.acks_due.pop_front();
      }
      while (s.send_round < rounds) {
        const uint32_t round = s.send_round;
        if (s.send_op == 0) {
          const bool target_done = round == 0 || s.acks >= round;
          const bool source_free = round == 0 || s.writes_done[round - 1] == kStreamWrites;
          if (!target_done || !source_free) return true;
          uint8_t* area = source + p * kStreamSpan;
          for (uint32_t k = 0; k < kStreamWrites; ++k) {
            for (size_t j = 0; j < kStreamSizes[k]; ++j) {
              area[stream_offset(k) + j] = stream_byte(r, round, k, j);
            }
          }
        }
        const uint32_t k = s.send_op / 2;
        Status st;
        if (s.send_op % 2 == 0) {
          const uint64_t cookie = (uint64_t{static_cast<uint32_t>(p)} << 32) | (round << 16) | k;
          st = me.write(*src[r], p * kStreamSpan + stream_offset(k), *remote[r][p],
                        r * kStreamSpan + stream_offset(k), kStreamSizes[k],
                        stream_tag(kData, round, k), cookie);
        } else {
          st = me.notify(p, stream_tag(kMarker, round, k));
        }
        if (st.code() == StatusCode::kBusy) return true;
        if (!st.ok())
          return fail("posting op " + std::to_string(s.send_op) + ": " + st.to_string());
        if (++s.send_op == 2 * kStreamWrites) {
          s.send_op = 0;
          ++s.send_round;
        }
      }
      return true;
    };
    auto receive = [&](const TransportCompletion& c) {
      if (c.peer < 0 || c.peer >= kRanks || c.peer == r) {
        return fail("a notification from rank " + std::to_string(c.peer));
      }
      Peer& s = peers[c.peer];
      const uint32_t what = c.tag >> 30, round = (c.tag >> 16) & 0x3fff, k = c.tag & 0xffff;
      const std::string from = "from rank " + std::to_string(c.peer) + ", round " +
                               std::to_string(round) + ", write " + std::to_string(k);
      if (what == kAck) {
        if (round != s.acks) return fail("ack out of order " + from);
        ++s.acks;
        return true;
      }
      if (what != kData && what != kMarker) return fail("unknown tag " + std::to_string(c.tag));
      const uint32_t expect_op = 2 * k + (what == kMarker ? 1 : 0);
      if (round != s.recv_round || expect_op != s.recv_op || k >= kStreamWrites) {
        return fail(std::string(what == kData ? "write " : "marker ") + from +
                    " out of order: expected op " + std::to_string(s.recv_op) + " of round " +
                    std::to_string(s.recv_round));
      }
      const uint8_t* area = in + c.peer * kStreamSpan + stream_offset(k);
      const size_t wrong = first_wrong(area, kStreamSizes[k], c.peer, round, k);
      if (wrong != kStreamSizes[k]) {
        return fail("write " + from + " (" + std::to_string(kStreamSizes[k]) + " bytes) not " +
                    "visible when its " + (what == kData ? "tag" : "marker") + " arrived: byte " +
                    std::to_string(wrong) + " is " + std::to_string(area[wrong]) + ", expected " +
                    std::to_string(stream_byte(c.peer, round, k, wrong)));
      }
      if (++s.recv_op == 2 * kStreamWrites) {
        s.acks_due.push_back(round);
        s.recv_op = 0;
        ++s.recv_round;
      }
      return true;
    };
    auto write_done = [&](const TransportCompletion& c) {
      const int p = static_cast<int>(c.cookie >> 32);
      const uint32_t round = (c.cookie >> 16) & 0xffff, k = c.cookie & 0xffff;
      if (p < 0 || p >= kRanks || p == r || round >= rounds || k >= kStreamWrites) {
        return fail("kWriteDone with a cookie no write had: " + std::to_string(c.cookie));
      }
      Peer& s = peers[p];
      const bool posted = round < s.send_round || (round == s.send_round && 2 * k < s.send_op);
      if (!posted) return fail("kWriteDone for a write not posted yet");
      if (s.done_once[round * kStreamWrites + k]) {
        return fail("a second kWriteDone for round " + std::to_string(round) + ", write " +
                    std::to_string(k) + " to rank " + std::to_string(p));
      }
      if (c.peer != p) {
        fail("kWriteDone of a write to rank " + std::to_string(p) + " names rank " +
             std::to_string(c.peer));
      }
      s.done_once[round * kStreamWrites + k] = true;
      ++s.writes_done[round];
      return true;
    };
    const auto deadline = Clock::now() + kPatience;
    while (!complete() && !failed.load()) {
      if (Clock::now() > deadline) {
        std::string state;
        for (int p = 0; p < kRanks; ++p) {
          if (p == r) continue;
          const Peer& s = peers[p];
          state += " [rank " + std::to_string(p) + ": sent round " + std::to_string(s.send_round) +
                   " op " + std::to_string(s.send_op) + ", acks " + std::to_string(s.acks) +
                   ", received round " + std::to_string(s.recv_round) + " op " +
                   std::to_string(s.recv_op) + "]";
        }
        fail("the stream did not finish:" + state);
        break;
      }
      for (int p = 0; p < kRanks; ++p) {
        if (p != r && !send_to(p)) break;
      }
      const size_t n = seen.poll(me);
      for (const TransportCompletion& c : seen.done) write_done(c);
      seen.done.clear();
      while (!seen.notes.empty() && !failed.load()) {
        receive(seen.notes.front());
        seen.notes.pop_front();
      }
      for (const TransportCompletion& c : seen.errors)
        fail("kPeerError for rank " + std::to_string(c.peer));
      seen.errors.clear();
      if (n == 0) me.wait(1ms);
    }
    poll_until_all_arrive(me, seen, finished, failed.load() ? 0 : kRanks);
    // Nothing more may come: every write completed once, every tag arrived once.
    EXPECT_TRUE(seen.notes.empty())
        << "rank " << r << ": " << seen.notes.size() << " notifications after the stream ended";
    for (const TransportCompletion& c : seen.done) write_done(c);
    EXPECT_TRUE(seen.errors.empty());
  });
}

// ---- kWriteDone: once per write, never for notify() ----

TEST_P(TransportContract, EveryWriteCompletesOnceAndNotifyNever) {
  ASSERT_NO_FATAL_FAILURE(make_world(2));
  constexpr size_t kSizes[] = {0, 1, 8, 64, 65, 512};
  constexpr size_t kCell = 512;
  const uint32_t ops = 900 / kSlowdown;
  Shared dst = share(1, 0, 64 * kCell);
  auto src = t(0).allocate(kCell, MemoryKind::kHost);
  ASSERT_TRUE(dst.remote && src.ok());
  std::vector<Completions> seen(2);
  // Cookies are opaque 64-bit values: 0 and all ones among them.
  std::map<uint64_t, uint32_t> cookies;  // cookie -> op
  uint32_t writes = 0;
  auto cookie_of = [](uint32_t w) {
    return w == 0 ? 0 : w == 1 ? UINT64_MAX : 0x9e3779b97f4a7c15ull * w;
  };
  for (uint32_t i = 0; i < ops; ++i) {
    Status s;
    if (i % 3 == 1) {
      s = post_all(seen, [&] { return t(0).notify(1, i); });
    } else {
      const uint64_t cookie = cookie_of(writes++);
      cookies[cookie] = i;
      s = post_all(seen, [&] {
        return t(0).write(*src.value(), 0, *dst.remote, (i % 64) * kCell,
                          kSizes[i % std::size(kSizes)], i, cookie);
      });
    }
    ASSERT_TRUE(s.ok()) << "op " << i << ": " << s.to_string();
    seen[1].poll(t(1));
  }
  ASSERT_TRUE(
      drive(seen, [&] { return seen[1].notes.size() >= ops && seen[0].done.size() >= writes; }))
      << seen[1].notes.size() << " of " << ops << " notifications, " << seen[0].done.size()
      << " of " << writes << " kWriteDone";
  // Late duplicates: keep both sides progressing a little longer.
  const auto linger = Clock::now() + 50ms;
  drive(seen, [&] { return Clock::now() > linger; });
  std::set<uint64_t> completed;
  for (const TransportCompletion& c : seen[0].done) {
    EXPECT_TRUE(cookies.count(c.cookie))
        << "kWriteDone with cookie " << c.cookie << ", which no write had (a notify()'s?)";
    EXPECT_TRUE(completed.insert(c.cookie).second) << "a second kWriteDone for cookie " << c.cookie;
    EXPECT_EQ(c.peer, 1) << "kWriteDone of a write to rank 1";
  }
  EXPECT_EQ(completed.size(), writes);
  EXPECT_TRUE(seen[1].done.empty()) << "kWriteDone at a rank that wrote nothing";
  EXPECT_TRUE(seen[0].notes.empty()) << "notifications at a rank nobody notified";
  ASSERT_EQ(seen[1].notes.size(), ops);
  for (uint32_t i = 0; i < ops; ++i) {
    EXPECT_EQ(seen[1].notes[i].tag, i);
    EXPECT_EQ(seen[1].notes[i].peer, 0);
  }
  EXPECT_TRUE(seen[0].errors.empty() && seen[1].errors.empty());
}

// ---- back-pressure ----

// A sender that keeps polling, a receiver that does not: posting ends in kBusy (no backend
// buffers without bound) and the refused operation is delivered never; once the receiver polls,
// sends go through again, and everything accepted arrives exactly once, in order. For
// notifications and for writes.
TEST_P(TransportContract, BusyDeliversNothingAndAcceptedOperationsArriveOnce) {
  ASSERT_NO_FATAL_FAILURE(make_world(2));
  ASSERT_NO_FATAL_FAILURE(warm_up());  // kBusy below is back-pressure, not a pair still connecting
  constexpr uint32_t kMaxOps = 1 << 14;  // far above any backend's queue
  constexpr size_t kCell = 8;
  Shared dst = share(1, 0, kMaxOps * kCell);
  auto src = t(0).allocate(kMaxOps * kCell, MemoryKind::kHost);
  ASSERT_TRUE(dst.remote && src.ok());
  auto* source = static_cast<uint64_t*>(src.value()->data());
  const auto* target = static_cast<const uint64_t*>(dst.local->data());
  for (uint32_t i = 0; i < kMaxOps; ++i) source[i] = 0x5a00000000000000ull | i;
  std::vector<Completions> seen(2);
  for (const bool writes : {false, true}) {
    SCOPED_TRACE(writes ? "writes" : "notifications");
    const uint32_t base = writes ? kMaxOps : 0;  // tags of this half
    auto op = [&](uint32_t i) {
      return writes ? t(0).write(*src.value(), i * kCell, *dst.remote, i * kCell, kCell, base + i,
                                 base + i)
                    : t(0).notify(1, base + i);
    };
    uint32_t refused = kMaxOps;
    for (uint32_t i = 0; i < kMaxOps; ++i) {
      const Status s = op(i);
      if (s.code() == StatusCode::kBusy) {
        refused = i;
        break;
      }
      ASSERT_TRUE(s.ok()) << s.to_string();
      seen[0].poll(t(0));
    }
    ASSERT_LT(refused, kMaxOps) << "no kBusy after " << kMaxOps
                                << " operations to a peer that does not poll";
    ASSERT_GT(refused, 0u) << "kBusy before anything was sent";
    // The refused one stays refused (it is not posted again); what follows is retried on kBusy,
    // so a kBusy that delivered shows as a tag that arrives twice.
    const uint32_t total = refused + 1 + std::max<uint32_t>(40, refused);
    ASSERT_LE(total, kMaxOps);
    for (uint32_t i = refused + 1; i < total; ++i) {
      Status s;
      const auto deadline = Clock::now() + kPatience;
      while ((s = op(i)).code() == StatusCode::kBusy && Clock::now() < deadline) {
        seen[1].poll(t(1));
        seen[0].poll(t(0));
      }
      ASSERT_TRUE(s.ok()) << "op " << i << " after the receiver polled: " << s.to_string();
    }
    const size_t expected = total - 1;
    ASSERT_TRUE(drive(seen,
                      [&] {
                        return seen[1].notes.size() >= expected &&
                               (!writes || seen[0].done.size() >= expected);
                      }))
        << seen[1].notes.size() << " of " << expected << " arrived";
    const auto linger = Clock::now() + 50ms;
    drive(seen, [&] { return Clock::now() > linger; });
    ASSERT_EQ(seen[1].notes.size(), expected) << "something arrived twice";
    uint32_t i = 0;
    for (const TransportCompletion& c : seen[1].notes) {
      if (i == refused) ++i;
      EXPECT_EQ(c.tag, base + i) << "position " << i << " (the refused one was " << refused
                                 << "): lost, repeated or out of order";
      EXPECT_EQ(c.peer, 0);
      if (writes && c.tag == base + i) {
        EXPECT_EQ(target[i], source[i]) << "write " << i << " not visible with its tag";
      }
      ++i;
    }
    if (writes) {
      EXPECT_EQ(target[refused], 0u) << "the write refused with kBusy landed";
      std::set<uint64_t> completed;
      for (const TransportCompletion& c : seen[0].done) {
        EXPECT_NE(c.cookie, base + refused) << "the write refused with kBusy completed";
        EXPECT_TRUE(completed.insert(c.cookie).second) << "cookie " << c.cookie << " twice";
      }
      EXPECT_EQ(completed.size(), expected);
    } else {
      EXPECT_TRUE(seen[0].done.empty()) << "kWriteDone for notify()";
    }
    EXPECT_TRUE(seen[0].errors.empty() && seen[1].errors.empty());
    seen[0] = Completions{};
    seen[1] = Completions{};
  }
}

// ---- wait() and wake() ----

// The sleep/wake handshake under pressure: the ranks take turns, the sender notifying after a
// random pause of up to 300 us, so notifications land while the receiver is between finding
// nothing and sleeping. A wake-up lost there makes the receiver sleep until its wait() ends on
// its own: the 10 s timeout, or a backend's shorter bound on each sleep (shm: 100 ms; verbs
// naps 1 ms, by design, and cannot show it). A loaded machine explains a few slow rounds, a
// lost wake-up (nearly) all of them.
TEST_P(TransportContract, NoWakeUpIsLostWhenNotificationsRaceTheSleep) {
  ASSERT_NO_FATAL_FAILURE(make_world(2));
  constexpr int kRounds = 300;
  std::atomic<bool> failed{false};
  std::atomic<int> finished{0};
  int slow[2] = {0, 0};
  Clock::duration longest[2] = {};
  run_threads(2, [&](int r) {
    Transport& me = t(r);
    Completions seen;
    std::mt19937 rng(11 + r);
    for (int i = 0; i < kRounds && !failed.load(); ++i) {
      if (i % 2 == r) {
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
        const Status s = post(me, seen, [&] { return me.notify(1 - r, i); });
        if (!s.ok()) {
          ADD_FAILURE() << "rank " << r << " round " << i << ": " << s.to_string();
          failed.store(true);
        }
        continue;
      }
      const auto t0 = Clock::now();
      while (seen.notes.empty() && !failed.load()) {
        if (Clock::now() - t0 > kPatience) {
          ADD_FAILURE() << "rank " << r << ": round " << i << "'s notification never came";
          failed.store(true);
          break;
        }
        if (seen.poll(me) == 0 && seen.notes.empty()) me.wait(10s);
      }
      if (seen.notes.empty()) break;
      const auto took = Clock::now() - t0;
      longest[r] = std::max(longest[r], took);
      slow[r] += took > 50ms;
      EXPECT_EQ(seen.notes.front().tag, static_cast<uint32_t>(i)) << "rank " << r;
      EXPECT_EQ(seen.notes.front().peer, 1 - r);
      seen.notes.pop_front();
    }
    poll_until_all_arrive(me, seen, finished, failed.load() ? 0 : 2);
    EXPECT_TRUE(seen.errors.empty());
  });
  for (int r = 0; r < 2; ++r) {
    // Sleeping through a notification until the 10 s timeout is a lost wake-up on any machine.
    EXPECT_LT(longest[r], 5s) << "rank " << r << " slept through a notification";
    EXPECT_LE(slow[r], kRounds / 2 / 8)
        << "rank " << r << ": " << slow[r] << " of " << kRounds / 2
        << " notifications took over 50 ms to be seen (lost wake-ups?)";
  }
}

// The progress engine's arrangement: one thread sleeps in wait() and hands over to another that
// polls, so the sleeper never polls. No notification may be slept through: each wait() ends
// because poll() may have something (or the backend's own bound), never at the 10 s timeout.
TEST_P(TransportContract, AWaiterThatDoesNotPollMissesNothing) {
  ASSERT_NO_FATAL_FAILURE(make_world(2));
  const uint32_t messages = 5000 / kSlowdown;
  std::atomic<bool> receiver_done{false};
  run_threads(2, [&](int r) {
    Transport& me = t(r);
    Completions seen;
    if (r == 0) {
      for (uint32_t i = 0; i < messages; ++i) {
        const Status s = post(me, seen, [&] { return me.notify(1, i); });
        ASSERT_TRUE(s.ok()) << s.to_string();
      }
      const auto deadline = Clock::now() + kPatience;
      while (!receiver_done.load() && Clock::now() < deadline) {
        if (seen.poll(me) == 0) me.wait(1ms);
      }
      return;
    }
    // turn: 0 the sleeper's, 1 the poller's, 2 over.
    std::atomic<int> turn{0};
    std::atomic<int64_t> longest_ms{0};
    std::thread sleeper([&] {
      for (;;) {
        const auto t0 = Clock::now();
        me.wait(10s);
        const int64_t ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
        if (ms > longest_ms.load()) longest_ms.store(ms);
        int expected = 0;
        if (!turn.compare_exchange_strong(expected, 1)) return;
        turn.notify_all();
        turn.wait(1);
        if (turn.load() == 2) return;
      }
    });
    uint32_t received = 0;
    const auto deadline = Clock::now() + kPatience;
    while (received < messages && Clock::now() < deadline) {
      turn.wait(0);
      while (seen.poll(me, 16) > 0) {
      }
      for (const TransportCompletion& c : seen.notes) {
        EXPECT_EQ(c.tag, received) << "lost, repeated or out of order";
        ++received;
      }
      seen.notes.clear();
      turn.store(0);
      turn.notify_all();
    }
    turn.store(2);
    turn.notify_all();
    me.wake();
    sleeper.join();
    receiver_done.store(true);
    EXPECT_EQ(received, messages);
    EXPECT_LT(longest_ms.load(), 5000)
        << "a wait() slept " << longest_ms.load() << " ms with a notification to deliver";
    EXPECT_TRUE(seen.errors.empty());
  });
}

// wake() ends a wait() from any thread, also one made before the wait(); a notification ends a
// wait() too; and a wait() with nothing to do sleeps rather than spins (spurious returns are
// allowed, a busy loop is not a wait).
TEST_P(TransportContract, WakeAndNotificationsEndAWait) {
  ASSERT_NO_FATAL_FAILURE(make_world(2));
  ASSERT_NO_FATAL_FAILURE(warm_up());  // idle below means idle: no set-up left for poll()
  Transport& a = t(0);
  Transport& b = t(1);
  {
    std::thread waker([&] {
      std::this_thread::sleep_for(50ms);
      b.wake();
    });
    const auto t0 = Clock::now();
    b.wait(30s);
    EXPECT_LT(Clock::now() - t0, 20s) << "wake() from another thread did not end the wait";
    waker.join();
  }
  {
    b.wake();
    const auto t0 = Clock::now();
    b.wait(30s);
    EXPECT_LT(Clock::now() - t0, 20s) << "a wake() before the wait() was lost";
  }
  {
    int returns = 0;
    const auto t0 = Clock::now();
    for (auto left = 300ms; left > 0ms;
         left = 300ms - std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0)) {
      b.wait(left);
      ++returns;
    }
    // verbs naps 1 ms at a time (about 300 returns); a wait() that does not block, millions.
    EXPECT_LT(returns, 3000) << "wait() returned " << returns << " times in 300 ms: it spins";
  }
  {
    // The notification comes while b sleeps; only b's own wait() can notice it.
    std::atomic<bool> received{false};
    std::thread notifier([&] {
      Completions seen;
      std::this_thread::sleep_for(50ms);
      const Status s = post(a, seen, [&] { return a.notify(1, 7); });
      EXPECT_TRUE(s.ok()) << s.to_string();
      const auto deadline = Clock::now() + kPatience;
      while (!received.load() && Clock::now() < deadline) {
        if (seen.poll(a) == 0) a.wait(1ms);
      }
    });
    Completions seen;
    const auto t0 = Clock::now();
    while (seen.notes.empty() && Clock::now() - t0 < kPatience) {
      b.wait(30s);
      seen.poll(b);
    }
    received.store(true);
    notifier.join();
    EXPECT_LT(Clock::now() - t0, 20s) << "wait() slept through a notification";
    ASSERT_EQ(seen.notes.size(), 1u);
    EXPECT_EQ(seen.notes[0].tag, 7u);
    EXPECT_EQ(seen.notes[0].peer, 0);
  }
  {
    // One thread sleeps in wait() while another drives b (receiving a stream) and a third
    // calls wake(): every wake() makes the sleeper return, and the driver gets everything.
    constexpr uint32_t kNotes = 300;
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> returns{0};
    std::thread sleeper([&] {
      while (!stop.load()) {
        b.wait(30s);
        returns.fetch_add(1);
      }
    });
    std::atomic<bool> driver_done{false};
    std::thread sender([&] {
      Completions seen;
      for (uint32_t i = 0; i < kNotes; ++i) {
        const Status s = post(a, seen, [&] { return a.notify(1, 100 + i); });
        ASSERT_TRUE(s.ok()) << s.to_string();
        if (i % 10 == 0) std::this_thread::sleep_for(1ms);
      }
      const auto deadline = Clock::now() + kPatience;
      while (!driver_done.load() && Clock::now() < deadline) {
        if (seen.poll(a) == 0) a.wait(1ms);
      }
    });
    uint32_t got = 0;
    bool in_order = true;
    std::thread driver([&] {
      Completions seen;
      const auto deadline = Clock::now() + kPatience;
      while (got < kNotes && Clock::now() < deadline) {
        if (seen.poll(b) == 0) std::this_thread::sleep_for(100us);
        for (const TransportCompletion& c : seen.notes) in_order &= c.tag == 100 + got++;
        seen.notes.clear();
      }
      driver_done.store(true);
    });
    int woken = 0;
    for (int k = 0; k < 10; ++k) {
      std::this_thread::sleep_for(20ms);
      const uint64_t before = returns.load();
      b.wake();
      const auto deadline = Clock::now() + 10s;
      while (returns.load() == before && Clock::now() < deadline) {
        std::this_thread::sleep_for(100us);
      }
      woken += returns.load() != before;
    }
    driver.join();
    sender.join();
    stop.store(true);
    b.wake();
    sleeper.join();
    EXPECT_EQ(woken, 10) << "wake() did not make the sleeping thread return";
    EXPECT_EQ(got, kNotes);
    EXPECT_TRUE(in_order);
  }
}

// wake_peer(), on backends whose allocations peers map: the ranks take turns storing a round
// number into the other's memory through the mapping and waking it with wake_peer(), after a
// random pause of up to 300 us, so that wake-ups land while the receiver is between finding
// nothing and sleeping. The receiver finds the stores by loads alone (as a partial allreduce's
// round boxes are found) and never polls. A lost wake-up shows as a wait that ends only at the
// backend's own bound (shm: 100 ms) or the 10 s timeout. A wake_peer() before the wait counts.
TEST_P(TransportContract, WakePeerEndsThePeersWaitAndLosesNoRace) {
  ASSERT_NO_FATAL_FAILURE(make_world(2));
  if (!t(0).maps_allocations()) {
    GTEST_SKIP() << GetParam() << " does not map its peers' allocations: wake_peer() does nothing "
                 << "and nothing calls it";
  }
  // cell[r]: rank r's memory, imported by the other rank, which stores into it.
  Shared cell[2] = {share(0, 1, 64), share(1, 0, 64)};
  ASSERT_TRUE(cell[0].remote && cell[1].remote);
  const int rounds = 300 / kSlowdown;
  std::atomic<bool> failed{false};
  int slow[2] = {0, 0};
  Clock::duration longest[2] = {};
  run_threads(2, [&](int r) {
    Transport& me = t(r);
    auto* mine = reinterpret_cast<std::atomic<uint32_t>*>(cell[r].local->data());
    auto* theirs = reinterpret_cast<std::atomic<uint32_t>*>(me.mapped_address(*cell[1 - r].remote));
    ASSERT_NE(theirs, nullptr);
    std::mt19937 rng(23 + r);
    for (int i = 0; i < rounds && !failed.load(); ++i) {
      const auto value = static_cast<uint32_t>(i + 1);
      if (i % 2 == r) {
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
        theirs->store(value, std::memory_order_release);
        me.wake_peer(1 - r);
        continue;
      }
      const auto t0 = Clock::now();
      while (mine->load(std::memory_order_acquire) != value) {
        if (failed.load() || Clock::now() - t0 > kPatience) {
          ADD_FAILURE() << "rank " << r << ": round " << i << "'s store never came";
          failed.store(true);
          break;
        }
        me.wait(10s);
      }
      const auto took = Clock::now() - t0;
      longest[r] = std::max(longest[r], took);
      slow[r] += took > 50ms;
    }
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_LT(longest[r], 5s) << "rank " << r << " slept through a wake_peer()";
    EXPECT_LE(slow[r], rounds / 2 / 8) << "rank " << r << ": " << slow[r] << " of " << rounds / 2
                                       << " stores took over 50 ms to be seen (lost wake-ups?)";
  }
  // Sticky: a wake-up that comes before the wait ends it at once.
  t(0).wake_peer(1);
  const auto t0 = Clock::now();
  t(1).wait(30s);
  EXPECT_LT(Clock::now() - t0, 20s) << "a wake_peer() before the wait() was lost";
}

// ---- stores through mapped memory ----

// Where the backend maps a peer's allocations (maps_allocations(), or a mapped_address() that
// is not null), stores through the mapping followed by notify() are a write: visible once the
// notification is seen on another thread; in one stream with write()s, the order holds too.
TEST_P(TransportContract, StoresThroughMappedMemoryArePublishedByNotify) {
  ASSERT_NO_FATAL_FAILURE(make_world(2));
  constexpr size_t kHalf = 64 * 1024;
  Shared region = share(1, 0, 2 * kHalf);
  ASSERT_TRUE(region.remote);
  auto* mapped = static_cast<uint8_t*>(t(0).mapped_address(*region.remote));
  if (t(0).maps_allocations()) {
    ASSERT_NE(mapped, nullptr) << "maps_allocations() is true, mapped_address() is null";
  }
  if (mapped == nullptr) {
    GTEST_SKIP() << GetParam() << " does not map its peers' memory here (maps_allocations() is "
                 << "false and mapped_address() null): callers use write()";
  }
  constexpr size_t kCell = 16;
  const uint32_t mixed = 3000 / kSlowdown;  // one cell each, below 2 * kHalf / kCell
  auto src = t(0).allocate(mixed * kCell, MemoryKind::kHost);
  ASSERT_TRUE(src.ok());
  auto cell_byte = [](uint32_t i, size_t j) { return static_cast<uint8_t>(i * 13 + j + 1); };
  const uint32_t words = 16000 / kSlowdown;  // one word each: no word is stored twice
  const uint32_t rounds = 200 / kSlowdown;
  enum : uint32_t { kWords = 0, kRounds = 1, kMixed = 2, kRoundAck = 3, kWordsAck = 4 };
  auto tag = [](uint32_t phase, uint32_t i) { return (phase << 28) | i; };
  std::atomic<int> finished{0};
  run_threads(2, [&](int r) {
    Transport& me = t(r);
    Completions seen;
    // The next notification of `phase`, by number; false after kPatience.
    auto next = [&](uint32_t phase, uint32_t i) {
      const auto deadline = Clock::now() + kPatience;
      while (seen.notes.empty()) {
        if (Clock::now() > deadline) return false;
        if (seen.poll(me) == 0) me.wait(1ms);
      }
      const TransportCompletion c = seen.notes.front();
      seen.notes.pop_front();
      EXPECT_EQ(c.tag, tag(phase, i)) << "lost, repeated or out of order";
      return c.tag == tag(phase, i);
    };
    if (r == 0) {
      // Words, each stored once then notified.
      auto* w = reinterpret_cast<uint32_t*>(mapped);
      for (uint32_t i = 0; i < words; ++i) {
        w[i] = i + 1;
        ASSERT_TRUE(post(me, seen, [&] { return me.notify(1, tag(kWords, i)); }).ok());
      }
      // The halves below overlap the words: not before the receiver has read them all.
      ASSERT_TRUE(next(kWordsAck, 0));
      // Whole 64 KiB halves, one round in flight: the next waits for the receiver's ack.
      for (uint32_t i = 0; i < rounds; ++i) {
        uint8_t* half = mapped + (i % 2) * kHalf;
        for (size_t j = 0; j < kHalf; ++j) half[j] = stream_byte(0, i, 0, j);
        ASSERT_TRUE(post(me, seen, [&] { return me.notify(1, tag(kRounds, i)); }).ok());
        ASSERT_TRUE(next(kRoundAck, i));
      }
      // Stores through the mapping and write()s in one stream.
      auto* from = static_cast<uint8_t*>(src.value()->data());
      for (uint32_t i = 0; i < mixed; ++i) {
        for (size_t j = 0; j < kCell; ++j) from[i * kCell + j] = cell_byte(i, j);
        Status s;
        if (i % 3 == 2) {
          std::memcpy(mapped + i * kCell, from + i * kCell, kCell);
          s = post(me, seen, [&] { return me.notify(1, tag(kMixed, i)); });
        } else {
          s = post(me, seen, [&] {
            return me.write(*src.value(), i * kCell, *region.remote, i * kCell, kCell,
                            tag(kMixed, i), i);
          });
        }
        ASSERT_TRUE(s.ok()) << s.to_string();
      }
    } else {
      const auto* base = static_cast<const uint8_t*>(region.local->data());
      const auto* w = reinterpret_cast<const uint32_t*>(base);
      uint32_t stale = 0;
      for (uint32_t i = 0; i < words; ++i) {
        ASSERT_TRUE(next(kWords, i));
        stale += w[i] != i + 1;
      }
      EXPECT_EQ(stale, 0u) << stale << " notifications arrived before their store";
      ASSERT_TRUE(post(me, seen, [&] { return me.notify(0, tag(kWordsAck, 0)); }).ok());
      for (uint32_t i = 0; i < rounds; ++i) {
        ASSERT_TRUE(next(kRounds, i));
        const uint8_t* half = base + (i % 2) * kHalf;
        size_t j = 0;
        while (j < kHalf && half[j] == stream_byte(0, i, 0, j)) ++j;
        EXPECT_EQ(j, kHalf) << "round " << i << ": byte " << j << " not visible with the notify";
        ASSERT_TRUE(post(me, seen, [&] { return me.notify(0, tag(kRoundAck, i)); }).ok());
      }
      for (uint32_t i = 0; i < mixed; ++i) {
        ASSERT_TRUE(next(kMixed, i));
        for (size_t j = 0; j < kCell; ++j) {
          ASSERT_EQ(base[i * kCell + j], cell_byte(i, j))
              << (i % 3 == 2 ? "store " : "write ") << i << " not visible with its tag";
        }
      }
    }
    poll_until_all_arrive(me, seen, finished, 2);
    EXPECT_TRUE(seen.errors.empty());
  });
}

// ---- regions ----

// allocate() gives zero-filled memory whose key a peer imports (same size, that peer);
// register_memory() gives a region over the caller's bytes (where the backend offers it: shm
// does not, kNotSupported), writable by peers in both directions. Where the ranks share an
// address space (maps_peer_memory()), user buffers are mapped too.
TEST_P(TransportContract, RegionsAreZeroFilledImportableAndWritable) {
  ASSERT_NO_FATAL_FAILURE(make_world(2));
  constexpr size_t kBytes = 1 << 20;
  Shared big = share(1, 0, kBytes);  // read here, written to by nobody (see below)
  ASSERT_TRUE(big.remote);
  EXPECT_EQ(big.local->size(), kBytes);
  EXPECT_EQ(big.local->kind(), MemoryKind::kHost);
  const auto* p = static_cast<const uint8_t*>(big.local->data());
  EXPECT_TRUE(std::all_of(p, p + kBytes, [](uint8_t b) { return b == 0; })) << "not zero-filled";
  EXPECT_EQ(big.remote->size(), kBytes);
  EXPECT_EQ(big.remote->peer(), 1);

  // Each round writes fresh memory: the emulated verbs device places data on a thread of its
  // own, ordered after this thread's earlier reads by nothing TSan can see (its rings are
  // mapped twice), so memory read, then written again, would look raced.
  constexpr uint32_t kRounds = 6;
  constexpr size_t kUser = 300 * 1000;
  std::vector<uint8_t> user(kRounds * kUser, 0);
  auto registered = t(1).register_memory(user.data(), user.size(), MemoryKind::kHost);
  if (!registered.ok()) {
    ASSERT_EQ(registered.status().code(), StatusCode::kNotSupported)
        << registered.status().to_string();
    return;  // writes between allocated regions are everything else's subject
  }
  EXPECT_EQ(registered.value()->data(), user.data());
  EXPECT_EQ(registered.value()->size(), kRounds * kUser);
  auto user_remote = t(0).import_region(1, registered.value()->remote_key());
  ASSERT_TRUE(user_remote.ok()) << user_remote.status().to_string();
  EXPECT_EQ(user_remote.value()->size(), kRounds * kUser);
  std::vector<uint8_t> source(kUser);
  auto source_region = t(0).register_memory(source.data(), source.size(), MemoryKind::kHost);
  ASSERT_TRUE(source_region.ok()) << source_region.status().to_string();
  auto staging = t(0).allocate(kUser, MemoryKind::kHost);
  ASSERT_TRUE(staging.ok());
  Shared landing = share(1, 0, kRounds * kUser);  // not `big`, read above
  ASSERT_TRUE(landing.remote);
  // The target progresses on its own thread: a write into memory the backend cannot map (ucx
  // over shared memory emulates those puts) needs the target's poll() to land.
  Poller target(t(1));
  Completions seen;
  auto arrived = [&](size_t notes) {
    return target.wait_for([&](const Completions& c) { return c.notes.size() >= notes; });
  };
  for (uint32_t i = 0; i < kRounds; ++i) {
    const size_t n = i % 2 ? kUser : 1000 + i;
    const size_t at = i * kUser;
    for (size_t j = 0; j < n; ++j) source[j] = stream_byte(0, i, 1, j);
    // From a registered buffer into a registered buffer, then into an allocation.
    Status s = post(t(0), seen, [&] {
      return t(0).write(*source_region.value(), 0, *user_remote.value(), at, n, 2 * i, 2 * i);
    });
    ASSERT_TRUE(s.ok()) << s.to_string();
    ASSERT_TRUE(arrived(2 * i + 1)) << "write " << i << " into user memory never arrived";
    EXPECT_EQ(first_wrong(user.data() + at, n, 0, i, 1), n) << "write " << i << " into user memory";
    std::memcpy(staging.value()->data(), source.data(), n);
    s = post(t(0), seen, [&] {
      return t(0).write(*staging.value(), 0, *landing.remote, at, n, 2 * i + 1, 2 * i + 1);
    });
    ASSERT_TRUE(s.ok()) << s.to_string();
    ASSERT_TRUE(arrived(2 * i + 2)) << "write " << i << " into allocated memory never arrived";
    EXPECT_EQ(first_wrong(static_cast<const uint8_t*>(landing.local->data()) + at, n, 0, i, 1), n)
        << "write " << i << " into allocated memory";
    // The sources are reused next round: every write of this one must have completed.
    const auto deadline = Clock::now() + kPatience;
    while (seen.done.size() < 2 * i + 2 && Clock::now() < deadline) {
      if (seen.poll(t(0)) == 0) t(0).wait(1ms);
    }
    ASSERT_EQ(seen.done.size(), 2 * i + 2);
  }
  if (t(0).maps_peer_memory()) {
    auto* user_mapped = static_cast<uint8_t*>(t(0).mapped_address(*user_remote.value()));
    ASSERT_NE(user_mapped, nullptr) << "maps_peer_memory() is true, a user buffer is not mapped";
    user_mapped[12345] = 0xa7;
    ASSERT_TRUE(post(t(0), seen, [&] { return t(0).notify(1, 99); }).ok());
    ASSERT_TRUE(arrived(2 * kRounds + 1));
    EXPECT_EQ(user[12345], 0xa7);
  }
  target.stop();
  EXPECT_TRUE(target.seen().errors.empty());
}

// write() and notify() return without the target's help: the interface is non-blocking (a
// progress engine must not hang in a call because a peer is busy computing). Delivery may wait
// for the target's poll(); the call may not. Checked for writes into an allocation and into
// registered user memory (where offered), each call on a thread of its own, the target idle.
TEST_P(TransportContract, WriteAndNotifyReturnWhileTheTargetDoesNotPoll) {
  ASSERT_NO_FATAL_FAILURE(make_world(2));
  Shared allocated = share(1, 0, 4096);
  auto src = t(0).allocate(4096, MemoryKind::kHost);
  ASSERT_TRUE(allocated.remote && src.ok());
  std::vector<uint8_t> user(4096, 0);
  std::unique_ptr<MemoryRegion> user_region;
  std::unique_ptr<RemoteRegion> user_remote;
  if (auto r = t(1).register_memory(user.data(), user.size(), MemoryKind::kHost); r.ok()) {
    user_region = std::move(r).value();
    auto imported = t(0).import_region(1, user_region->remote_key());
    ASSERT_TRUE(imported.ok()) << imported.status().to_string();
    user_remote = std::move(imported).value();
  }
  std::vector<Completions> seen(2);
  uint32_t posted = 0;
  // Runs `op` on a thread; if it has not returned within 5 s, says so and polls the target
  // until it does (a call that waits for the target returns then).
  auto returns_alone = [&](const std::string& what, const std::function<Status()>& op) {
    std::atomic<bool> returned{false};
    Status s;
    std::thread caller([&] {
      s = op();
      returned.store(true);
    });
    const auto deadline = Clock::now() + 5s;
    while (!returned.load() && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
    if (!returned.load()) {
      ADD_FAILURE() << GetParam() << ": " << what
                    << " did not return in 5 s while the target was not polling: it waits for "
                       "the target's progress (transport.h: the interface is non-blocking)";
      while (!returned.load()) seen[1].poll(t(1));
    }
    caller.join();
    EXPECT_TRUE(s.ok() || s.code() == StatusCode::kBusy) << what << ": " << s.to_string();
    posted += s.ok();
  };
  returns_alone("notify()", [&] { return t(0).notify(1, 1); });
  returns_alone("write() into an allocation",
                [&] { return t(0).write(*src.value(), 0, *allocated.remote, 0, 4096, 2, 2); });
  // Known violation, left open (issue 18's closing note): ucx's put into memory it cannot map
  // (registered user memory over shared memory) is flushed synchronously (flush_peer), which
  // waits for the target's progress. Fixing it means queueing the ring notification behind a
  // non-blocking flush per peer.
  const bool known_blocking = GetParam() == "ucx";
  if (user_remote && !known_blocking) {
    returns_alone("write() into registered user memory",
                  [&] { return t(0).write(*src.value(), 0, *user_remote, 0, 4096, 3, 3); });
  }
  ASSERT_TRUE(drive(seen, [&] { return seen[1].notes.size() == posted; }))
      << seen[1].notes.size() << " of " << posted << " arrived once the target polled";
}

// ---- bad input ----

// Remote keys that are garbage, cut short, padded, from another rank, or from another world are
// refused (kInvalidArgument or kProtocolError, with a message), never a crash; the transport
// keeps working afterwards.
TEST_P(TransportContract, BadKeysAreClearErrors) {
  ASSERT_NO_FATAL_FAILURE(make_world(3));
  ASSERT_NO_FATAL_FAILURE(make_world(2));  // another world of the same backend
  Shared good = share(1, 0, 4096);
  ASSERT_TRUE(good.remote);
  const std::vector<uint8_t> key = good.local->remote_key();
  ASSERT_FALSE(key.empty());
  Transport& a = t(0);
  auto refused = [&](int peer, const std::vector<uint8_t>& k, const std::string& what) {
    expect_bad_input(a.import_region(peer, k).status(), what);
  };
  refused(1, {}, "an empty key");
  for (size_t n = 0; n < key.size(); ++n) {
    refused(1, std::vector<uint8_t>(key.begin(), key.begin() + n),
            "the key cut to " + std::to_string(n) + " of " + std::to_string(key.size()) + " bytes");
  }
  std::vector<uint8_t> padded = key;
  padded.push_back(0x42);
  refused(1, padded, "the key with a byte appended");
  refused(1, std::vector<uint8_t>(key.size(), 0), "zeros");
  refused(1, std::vector<uint8_t>(key.size(), 0xff), "0xff bytes");
  std::mt19937 rng(5);
  for (size_t n : {key.size(), key.size(), size_t{3}, size_t{1000}}) {
    std::vector<uint8_t> noise(n);
    for (uint8_t& b : noise) b = static_cast<uint8_t>(rng());
    refused(1, noise, std::to_string(n) + " random bytes");
  }
  refused(1, t(1).local_address(), "a transport address");
  refused(2, key, "rank 1's key as rank 2's");
  refused(0, key, "rank 1's key as this rank's own");
  auto other_world = t(1, 1).allocate(4096, MemoryKind::kHost);
  ASSERT_TRUE(other_world.ok());
  refused(1, other_world.value()->remote_key(), "rank 1's key from another world");
  for (int peer : {-1, 3, 1000}) {
    const Status s = a.import_region(peer, key).status();
    expect_refused(s, "a key for rank " + std::to_string(peer));
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  }
  // Still working: the good key imports again and a write through it arrives.
  auto again = a.import_region(1, key);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  auto src = a.allocate(64, MemoryKind::kHost);
  ASSERT_TRUE(src.ok());
  std::memset(src.value()->data(), 0x3c, 64);
  std::vector<Completions> seen(3);
  ASSERT_TRUE(
      post_all(seen, [&] { return a.write(*src.value(), 0, *again.value(), 100, 64, 5, 5); }).ok());
  ASSERT_TRUE(drive(seen, [&] { return !seen[1].notes.empty(); }));
  EXPECT_EQ(static_cast<const uint8_t*>(good.local->data())[163], 0x3c);
}

// Out-of-bounds writes, peers that do not exist and null registrations are kInvalidArgument,
// and refused ones leave nothing behind: no delivery, no completion.
TEST_P(TransportContract, BadOffsetsAndPeersAreClearErrors) {
  ASSERT_NO_FATAL_FAILURE(make_world(2));
  Shared dst = share(1, 0, 128);
  auto src = t(0).allocate(64, MemoryKind::kHost);
  ASSERT_TRUE(dst.remote && src.ok());
  Transport& a = t(0);
  auto invalid = [](const Status& s, const std::string& what) {
    expect_refused(s, what);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << what << ": " << s.to_string();
  };
  invalid(a.write(*src.value(), 0, *dst.remote, 100, 64, 1, 1), "past the remote end");
  invalid(a.write(*src.value(), 32, *dst.remote, 0, 64, 1, 1), "past the local end");
  invalid(a.write(*src.value(), 0, *dst.remote, 129, 0, 1, 1), "an empty write past the end");
  invalid(a.write(*src.value(), SIZE_MAX, *dst.remote, 0, 2, 1, 1), "a wrapping local offset");
  invalid(a.write(*src.value(), 0, *dst.remote, SIZE_MAX - 1, 4, 1, 1), "a wrapping offset");
  invalid(a.write(*src.value(), 0, *dst.remote, 0, SIZE_MAX, 1, 1), "SIZE_MAX bytes");
  for (int peer : {-1, 2, 1 << 20}) {
    invalid(a.notify(peer, 1), "notify to rank " + std::to_string(peer));
  }
  invalid(a.register_memory(nullptr, 64, MemoryKind::kHost).status(), "registering null");
  std::vector<Completions> seen(2);
  const auto linger = Clock::now() + 50ms;
  drive(seen, [&] { return Clock::now() > linger; });
  EXPECT_TRUE(seen[0].done.empty()) << "a refused write completed";
  EXPECT_TRUE(seen[1].notes.empty()) << "a refused write notified";
  // The edges themselves are fine: the last byte, and 0 bytes at the very end.
  std::memset(src.value()->data(), 0x5c, 64);
  ASSERT_TRUE(
      post_all(seen, [&] { return a.write(*src.value(), 63, *dst.remote, 127, 1, 2, 2); }).ok());
  ASSERT_TRUE(
      post_all(seen, [&] { return a.write(*src.value(), 64, *dst.remote, 128, 0, 3, 3); }).ok());
  ASSERT_TRUE(drive(seen, [&] { return seen[1].notes.size() == 2 && seen[0].done.size() == 2; }));
  // Read only now: the emulated verbs device places data on a thread of its own, ordered after
  // this thread's earlier reads by nothing TSan can see (its rings are mapped twice).
  const auto* d = static_cast<const uint8_t*>(dst.local->data());
  EXPECT_TRUE(std::all_of(d, d + 127, [](uint8_t b) { return b == 0; }))
      << "a refused write landed";
  EXPECT_EQ(d[127], 0x5c);
}

// connect() is idempotent and refuses addresses that are garbage, cut short or another rank's;
// after the refusals the right address connects and traffic flows.
TEST_P(TransportContract, ConnectIsIdempotentAndBadAddressesAreErrors) {
  ASSERT_NO_FATAL_FAILURE(make_world(2, /*connect=*/false));
  Transport& a = t(0);
  Transport& b = t(1);
  const std::vector<uint8_t> address = b.local_address();
  ASSERT_FALSE(address.empty());
  expect_bad_input(a.connect(1, {}), "an empty address");
  expect_bad_input(a.connect(1, std::vector<uint8_t>(address.begin(), address.end() - 1)),
                   "the address cut by a byte");
  expect_bad_input(
      a.connect(1, std::vector<uint8_t>(address.begin(), address.begin() + address.size() / 2)),
      "half the address");
  expect_bad_input(a.connect(1, std::vector<uint8_t>(address.size(), 0x77)), "garbage");
  expect_bad_input(a.connect(1, a.local_address()), "rank 0's address as rank 1's");
  for (int peer : {-1, 2}) {
    const Status s = a.connect(peer, address);
    expect_refused(s, "connect to rank " + std::to_string(peer));
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  }
  ASSERT_TRUE(a.connect(1, address).ok());
  ASSERT_TRUE(a.connect(1, address).ok()) << "connect() is not idempotent";
  ASSERT_TRUE(b.connect(0, a.local_address()).ok());
  ASSERT_TRUE(b.connect(0, a.local_address()).ok()) << "connect() is not idempotent";
  Shared dst = share(1, 0, 64);
  ASSERT_TRUE(dst.remote);
  auto src = a.allocate(64, MemoryKind::kHost);
  ASSERT_TRUE(src.ok());
  std::vector<Completions> seen(2);
  ASSERT_TRUE(
      post_all(seen, [&] { return a.write(*src.value(), 0, *dst.remote, 0, 64, 1, 1); }).ok());
  ASSERT_TRUE(post_all(seen, [&] { return b.notify(0, 2); }).ok());
  ASSERT_TRUE(drive(seen, [&] { return seen[1].notes.size() == 1 && seen[0].notes.size() == 1; }));
  EXPECT_EQ(seen[1].notes[0].tag, 1u);
  EXPECT_EQ(seen[0].notes[0].tag, 2u);
}

// ---- close() ----

// After close(): write() and notify() fail (not kBusy: there is no later), poll() returns
// nothing, close() again is harmless, the regions stay usable, and they may outlive the
// transport itself.
TEST_P(TransportContract, CloseEndsOperationsAndIsIdempotent) {
  ASSERT_NO_FATAL_FAILURE(make_world(2));
  Shared dst = share(1, 0, 4096);
  auto src = t(0).allocate(4096, MemoryKind::kHost);
  ASSERT_TRUE(dst.remote && src.ok());
  Shared back = share(0, 1, 4096);  // rank 0's region that rank 1 writes into
  ASSERT_TRUE(back.remote);
  std::vector<Completions> seen(2);
  ASSERT_TRUE(
      post_all(seen, [&] { return t(0).write(*src.value(), 0, *dst.remote, 0, 4096, 1, 1); }).ok());
  ASSERT_TRUE(drive(seen, [&] { return seen[1].notes.size() == 1 && seen[0].done.size() == 1; }));
  // Rank 1 keeps progressing while rank 0 closes (a closing ucx rank waits for its answer).
  std::atomic<bool> stop{false};
  std::thread peer([&] {
    Completions mine;
    while (!stop.load()) {
      if (mine.poll(t(1)) == 0) t(1).wait(1ms);
    }
  });
  const auto t0 = Clock::now();
  t(0).close();
  EXPECT_LT(Clock::now() - t0, 20s) << "close() with a live peer took too long";
  stop.store(true);
  peer.join();
  Transport& closed = t(0);
  for (int k = 0; k < 3; ++k) {
    expect_refused(closed.write(*src.value(), 0, *dst.remote, 0, 64, 2, 2), "write after close");
    expect_refused(closed.notify(1, 3), "notify after close");
    TransportCompletion buf[8];
    EXPECT_EQ(closed.poll(buf), 0u) << "poll() after close returned something";
  }
  closed.close();
  closed.wake();
  const auto t1 = Clock::now();
  closed.wait(10ms);
  EXPECT_LT(Clock::now() - t1, 20s);
  // The regions are still this rank's memory.
  std::memset(src.value()->data(), 0x11, src.value()->size());
  std::memset(back.local->data(), 0x22, back.local->size());
  // And they outlive the transport (the remote region imported from rank 1 too).
  owned(0).reset();
  std::memset(src.value()->data(), 0x33, src.value()->size());
  EXPECT_EQ(static_cast<const uint8_t*>(back.local->data())[4095], 0x22);
  dst.remote.reset();
  src.value().reset();
  back.local.reset();
}

// A rank that closes right after writing: what it posted still arrives, intact, at a peer that
// keeps polling (close() finishes what is in flight, at a bounded deadline).
TEST_P(TransportContract, ClosingRightAfterWritingLosesNothing) {
  ASSERT_NO_FATAL_FAILURE(make_world(2));
  constexpr size_t kBytes = 256 * 1024;
  constexpr uint32_t kWrites = 16;
  Shared dst = share(1, 0, kWrites * kBytes);
  auto src = t(0).allocate(kWrites * kBytes, MemoryKind::kHost);
  ASSERT_TRUE(dst.remote && src.ok());
  auto* from = static_cast<uint8_t*>(src.value()->data());
  for (uint32_t i = 0; i < kWrites; ++i) {
    for (size_t j = 0; j < kBytes; ++j) from[i * kBytes + j] = stream_byte(0, i, 2, j);
  }
  Completions at_peer;
  std::atomic<bool> closed{false};
  std::thread peer([&] {
    // Until everything arrived and rank 0's close() returned (it may wait for this poll()).
    const auto deadline = Clock::now() + kPatience;
    while ((at_peer.notes.size() < kWrites + 1 || !closed.load()) && Clock::now() < deadline) {
      if (at_peer.poll(t(1)) == 0) t(1).wait(1ms);
    }
  });
  Completions seen;
  for (uint32_t i = 0; i < kWrites; ++i) {
    const Status s = post(t(0), seen, [&] {
      return t(0).write(*src.value(), i * kBytes, *dst.remote, i * kBytes, kBytes, i, i);
    });
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  EXPECT_TRUE(post(t(0), seen, [&] { return t(0).notify(1, kWrites); }).ok());
  const auto t0 = Clock::now();
  t(0).close();  // without waiting for kWriteDone
  const auto took = Clock::now() - t0;
  closed.store(true);
  EXPECT_LT(took, 20s) << "close() with a live peer took too long";
  peer.join();
  ASSERT_EQ(at_peer.notes.size(), kWrites + 1) << "posted before close(), never arrived";
  const auto* got = static_cast<const uint8_t*>(dst.local->data());
  for (uint32_t i = 0; i < kWrites; ++i) {
    EXPECT_EQ(at_peer.notes[i].tag, i);
    EXPECT_EQ(first_wrong(got + i * kBytes, kBytes, 0, i, 2), kBytes) << "write " << i;
  }
  EXPECT_EQ(at_peer.notes[kWrites].tag, kWrites);
  // Whether the peer learns of the close as a kPeerError is the backend's to say (ucx: no;
  // verbs over rdma_cm: the disconnect), but not before what the closing rank sent.
  for (const TransportCompletion& c : at_peer.errors) EXPECT_EQ(c.peer, 0);
  if (!at_peer.errors.empty()) {
    EXPECT_EQ(at_peer.notes_before_error, kWrites + 1)
        << "kPeerError for the closed rank overtook what it sent before close()";
  }
}

// peer_left(): false for peers that are there; once a peer closed its transport, true at the
// others as soon as they learn of it while they poll (shm and inproc at once, ucx from its
// goodbye, verbs from the disconnect), so that the errors of writes and notifies to it can be
// told from failures (a normal shutdown warns about nothing).
TEST_P(TransportContract, AClosedPeerIsReportedAsLeft) {
  ASSERT_NO_FATAL_FAILURE(make_world(2));
  ASSERT_NO_FATAL_FAILURE(warm_up());
  EXPECT_FALSE(t(0).peer_left(1));
  EXPECT_FALSE(t(1).peer_left(0));
  EXPECT_FALSE(t(1).peer_left(1)) << "itself";
  EXPECT_FALSE(t(1).peer_left(7)) << "a rank out of range";
  std::thread closer([&] { t(0).close(); });
  Completions seen;
  const auto deadline = Clock::now() + kPatience;
  while (!t(1).peer_left(0) && Clock::now() < deadline) {
    if (seen.poll(t(1)) == 0) t(1).wait(1ms);
  }
  closer.join();
  EXPECT_TRUE(t(1).peer_left(0)) << GetParam() << ": rank 1 never learnt that rank 0 left";
  const Status s = t(1).notify(0, 1);
  EXPECT_FALSE(s.ok()) << "a notify to a peer that left was accepted";
}

// One rank closes; the others go on. They may try to write to it and notify it (refused or
// accepted, as the backend tells that the rank left) without crashing, nothing of it reaches
// the closed rank's regions ("no peer writes into them any more"), and they still talk to
// each other without errors.
TEST_P(TransportContract, APeersCloseLeavesTheOthersWorking) {
  constexpr int kRanks = 3;
  ASSERT_NO_FATAL_FAILURE(make_world(kRanks));
  constexpr size_t kBytes = 4096;
  Shared at0 = share(0, 1, kBytes);  // rank 0's region, imported by rank 1
  Shared at1 = share(1, 2, kBytes);
  Shared at2 = share(2, 1, kBytes);
  auto src1 = t(1).allocate(kBytes, MemoryKind::kHost);
  auto src2 = t(2).allocate(kBytes, MemoryKind::kHost);
  ASSERT_TRUE(at0.remote && at1.remote && at2.remote && src1.ok() && src2.ok());
  std::memset(src1.value()->data(), 0x61, kBytes);
  std::memset(src2.value()->data(), 0x62, kBytes);
  std::atomic<int> phase{0};  // 1: rank 0 closed
  std::atomic<int> finished{0};
  constexpr uint32_t kExchange = 20;
  Status to_closed_write, to_closed_notify;
  std::thread closer([&] {
    t(0).close();
    phase.store(1);
  });
  run_threads(2, [&](int i) {
    const int r = i + 1, other = 3 - r;
    Transport& me = t(r);
    Completions seen;
    const auto deadline = Clock::now() + kPatience;
    while (phase.load() == 0 && Clock::now() < deadline) {
      if (seen.poll(me) == 0) me.wait(1ms);
    }
    ASSERT_EQ(phase.load(), 1) << "rank 0's close() did not return";
    if (r == 1) {
      // Either answer is the backend's to give; only no crash and no landing are promised.
      to_closed_write = me.write(*src1.value(), 0, *at0.remote, 0, kBytes, 9, 9);
      to_closed_notify = me.notify(0, 9);
    }
    MemoryRegion& src = r == 1 ? *src1.value() : *src2.value();
    RemoteRegion& dst = r == 1 ? *at2.remote : *at1.remote;
    for (uint32_t k = 0; k < kExchange; ++k) {
      const Status s = post(me, seen, [&] { return me.write(src, 0, dst, 0, kBytes, k, k); });
      ASSERT_TRUE(s.ok()) << "rank " << r << " to rank " << other << ": " << s.to_string();
    }
    uint32_t got = 0;
    while (got < kExchange && Clock::now() < deadline) {
      if (seen.poll(me) == 0) me.wait(1ms);
      for (const TransportCompletion& c : seen.notes) {
        if (c.peer != other) continue;
        EXPECT_EQ(c.tag, got) << "rank " << r << " from rank " << other;
        ++got;
      }
      seen.notes.clear();
    }
    EXPECT_EQ(got, kExchange) << "rank " << r << " from rank " << other;
    poll_until_all_arrive(me, seen, finished, 2);
    for (const TransportCompletion& c : seen.errors) {
      EXPECT_EQ(c.peer, 0) << "rank " << r << " lost rank " << c.peer << ", which did not close";
    }
  });
  closer.join();
  const auto* mem0 = static_cast<const uint8_t*>(at0.local->data());
  EXPECT_TRUE(std::all_of(mem0, mem0 + kBytes, [](uint8_t b) { return b == 0; }))
      << "a write to rank 0 after it closed landed in its region (write() said "
      << to_closed_write.to_string() << ")";
  const auto* mem1 = static_cast<const uint8_t*>(at1.local->data());
  EXPECT_EQ(mem1[kBytes - 1], 0x62);
  TransportCompletion buf[8];
  EXPECT_EQ(t(0).poll(buf), 0u) << "poll() after close returned something";
}

INSTANTIATE_TEST_SUITE_P(Backends, TransportContract, ::testing::ValuesIn(registry_backends()),
                         test_name_of);

}  // namespace
}  // namespace eagercomm::test
