// The shared part of ucx_transport_test (one program of several files: see
// tests/transport/ucx_transport_test.cc): ranks as forked processes with their own UCP
// context (Ctx, run_world), the stream of writes and notifications between every pair
// (stream_exchange), and the two fixtures. Only for a build with UCX (EAGERCOMM_HAVE_UCX).
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "collectives/config.h"
#include "runtime/file_store.h"
#include "runtime/store.h"
#include "tests/harness/process_world.h"
#include "tests/harness/thread_world.h"
#include "transport/mailbox.h"
#include "transport/registry.h"
#include "transport/ucx/ucx_transport.h"

namespace eagercomm::test::ucx_test {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

enum class Tls { kShm, kTcp, kDefault };

inline const char* tls_name(Tls t) {
  switch (t) {
    case Tls::kShm:
      return "Shm";
    case Tls::kTcp:
      return "Tcp";
    default:
      return "Default";
  }
}

// UCX_TLS for a rank; nullptr keeps the environment's.
inline const char* tls_value(Tls t) {
  switch (t) {
    case Tls::kShm:
      return "shm,self";
    case Tls::kTcp:
      return "tcp";
    default:
      return nullptr;
  }
}

inline constexpr uint32_t kHelloTag = 0xfffffff0u;

inline std::string temp_dir() {
  char tmpl[] = "/tmp/ec-ucx-test-XXXXXX";
  const char* d = mkdtemp(tmpl);
  return d ? std::string(d) : std::string();
}

// One rank's view inside its forked process.
struct Ctx {
  int rank = 0;
  int size = 0;
  Tls tls = Tls::kDefault;
  Store* store = nullptr;
  std::unique_ptr<Transport> owned;  // the body may destroy it (then t is null)
  Transport* t = nullptr;
  std::deque<TransportCompletion> notes;  // kNotify, in poll order
  std::vector<uint64_t> done;             // kWriteDone cookies, in poll order
  std::vector<TransportCompletion> errors;

  // Drains the transport's completions into notes / done / errors.
  size_t pump() {
    TransportCompletion c[64];
    size_t total = 0;
    for (;;) {
      const size_t n = t->poll(c);
      for (size_t i = 0; i < n; ++i) {
        switch (c[i].kind) {
          case TransportCompletion::Kind::kNotify:
            notes.push_back(c[i]);
            break;
          case TransportCompletion::Kind::kWriteDone:
            done.push_back(c[i].cookie);
            break;
          case TransportCompletion::Kind::kPeerError:
            errors.push_back(c[i]);
            ADD_FAILURE() << "rank " << rank << ": kPeerError for rank " << c[i].peer;
            break;
        }
      }
      total += n;
      if (n < std::size(c)) return total;
    }
  }

  // Pumps (sleeping in wait() when idle) until pred() holds or `limit` passes.
  bool pump_until(const std::function<bool()>& pred, std::chrono::nanoseconds limit = 30s) {
    const auto deadline = Clock::now() + limit;
    while (!pred()) {
      if (Clock::now() > deadline) return false;
      if (pump() == 0 && !pred()) t->wait(1ms);
    }
    return true;
  }

  // All ranks reach `name`; keeps the transport progressing meanwhile (TCP peers need it)
  // unless `progress` is false (another thread drives, or the test wants this rank idle).
  void barrier(const std::string& name, bool progress = true) {
    ASSERT_TRUE(store->add("barrier/" + name, 1).ok());
    const auto deadline = Clock::now() + 30s;
    for (;;) {
      auto v = store->add("barrier/" + name, 0);
      ASSERT_TRUE(v.ok()) << v.status().to_string();
      if (v.value() >= size) return;
      ASSERT_LT(Clock::now(), deadline) << "rank " << rank << ": barrier " << name;
      if (progress) pump();
      std::this_thread::sleep_for(200us);
    }
  }

  void publish(const std::string& key, const std::vector<uint8_t>& value) {
    ASSERT_TRUE(store->set(key + "/" + std::to_string(rank), value).ok());
  }
  Bytes fetch(const std::string& key, int from) {
    auto v = store->get(key + "/" + std::to_string(from), 30s);
    EXPECT_TRUE(v.ok()) << v.status().to_string();
    return v.ok() ? v.value() : Bytes{};
  }

  // notify() that retries on back-pressure.
  void notify(int peer, uint32_t tag) {
    for (;;) {
      Status s = t->notify(peer, tag);
      if (s.code() != StatusCode::kBusy) {
        ASSERT_TRUE(s.ok()) << s.to_string();
        return;
      }
      pump();
    }
  }

  // The first notification from `peer` still queued, removed; false if none.
  bool take_note(int peer, uint32_t* tag) {
    for (auto it = notes.begin(); it != notes.end(); ++it) {
      if (it->peer == peer) {
        *tag = it->tag;
        notes.erase(it);
        return true;
      }
    }
    return false;
  }
};

struct WorldOptions {
  UcxTransportOptions ucx;
  bool connect = true;  // connect every peer and exchange a hello (wire-up done)
  std::function<void(int rank)> before_ucx;  // runs in the rank's process before ucp_init
};

// Runs `body` on `size` forked ranks; each exits 0 only without test failures.
inline void run_world(int size, Tls tls, const std::function<void(Ctx&)>& body,
                      const WorldOptions& options = {}) {
  const std::string dir = temp_dir();
  ASSERT_FALSE(dir.empty()) << "mkdtemp: " << std::strerror(errno);
  ProcessWorldOptions world;
  world.label = tls_name(tls);
  run_process_world(
      size,
      [&](int r) {
        if (const char* v = tls_value(tls)) setenv("UCX_TLS", v, 1);
        if (options.before_ucx) options.before_ucx(r);
        {
          auto store = FileStore::open(dir);
          Config config;
          Ctx ctx;
          if (!store.ok()) {
            ADD_FAILURE() << store.status().to_string();
          } else {
            TransportParams params{r, size, &config, store.value().get(), "ucx-test"};
            auto made = create_ucx_transport(params, options.ucx);
            if (!made.ok()) {
              ADD_FAILURE() << "rank " << r << ": " << made.status().to_string();
            } else {
              ctx.owned = std::move(made).value();
            }
          }
          if (ctx.owned) {
            Transport* t = ctx.owned.get();
            ctx.rank = r;
            ctx.size = size;
            ctx.tls = tls;
            ctx.store = store.value().get();
            ctx.t = t;
            [&] {
              if (!options.connect) return;
              ctx.publish("addr", t->local_address());
              for (int p = 0; p < size; ++p) {
                if (p == r) continue;
                const Bytes a = ctx.fetch("addr", p);
                Status s = t->connect(p, a);
                ASSERT_TRUE(s.ok()) << s.to_string();
              }
              for (int p = 0; p < size; ++p) {
                if (p != r) ctx.notify(p, kHelloTag);
              }
              ASSERT_TRUE(ctx.pump_until([&] {
                int hellos = 0;
                for (auto& n : ctx.notes) hellos += n.tag == kHelloTag;
                return hellos == size - 1;
              })) << "rank "
                  << r << ": no hello from every peer";
              ctx.notes.clear();
            }();
            if (!::testing::Test::HasFailure()) body(ctx);
            ctx.owned.reset();
          }
        }
      },
      world);
  std::string cmd = "rm -rf '" + dir + "'";
  if (system(cmd.c_str()) != 0) fprintf(stderr, "could not remove %s\n", dir.c_str());
}

// ---- A stream of writes + notifications between every pair, with acknowledgements ----

inline constexpr size_t kSlotBytes = 256 * 1024;
inline constexpr uint32_t kWindow = 4;
inline constexpr size_t kSizes[] = {8, 0, 1, 4096, 65536, 262144, 100, 8195, 32768, 131072};

inline uint8_t pattern(int sender, uint32_t i, size_t j) {
  return static_cast<uint8_t>((sender * 59 + i * 131 + j * 7) ^ (j >> 9));
}
inline size_t size_of(uint32_t i) { return kSizes[i % std::size(kSizes)]; }

// Tag layout of the stream: bits 31..30 kind, 29..0 the index.
inline constexpr uint32_t kData = 0, kMarker = 1, kAck = 2;
inline uint32_t stream_tag(uint32_t kind, uint32_t i) { return (kind << 30) | i; }

// Every rank sends `count` writes to every other rank (window of kWindow slots, a marker
// notification after every 7th, one ack back per write) and checks what it receives: data
// visible when its tag arrives, markers right after their write (FIFO across write and
// notify), acks in order, exactly one kWriteDone per cookie before its source is reused.
inline void stream_exchange(Ctx& c, uint32_t count) {
  const size_t bytes = static_cast<size_t>(c.size) * kWindow * kSlotBytes;
  auto src = c.t->allocate(bytes, MemoryKind::kHost);
  auto dst = c.t->allocate(bytes, MemoryKind::kHost);
  ASSERT_TRUE(src.ok() && dst.ok());
  c.publish("dst", dst.value()->remote_key());
  std::vector<std::unique_ptr<RemoteRegion>> remote(c.size);
  for (int p = 0; p < c.size; ++p) {
    if (p == c.rank) continue;
    auto r = c.t->import_region(p, c.fetch("dst", p));
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    remote[p] = std::move(r).value();
  }
  struct PeerState {
    uint32_t next_send = 0, acked = 0, recv_expect = 0;
    int64_t marker_pending = -1;
    std::vector<bool> src_busy = std::vector<bool>(kWindow, false);
  };
  std::vector<PeerState> ps(c.size);
  auto* src_base = static_cast<uint8_t*>(src.value()->data());
  const auto* dst_base = static_cast<const uint8_t*>(dst.value()->data());
  auto finished = [&] {
    for (int p = 0; p < c.size; ++p) {
      if (p == c.rank) continue;
      if (ps[p].acked < count || ps[p].recv_expect < count) return false;
    }
    return true;
  };
  // kWriteDone: the write's source slot may be reused; exactly one per write.
  auto absorb_done = [&] {
    for (uint64_t cookie : c.done) {
      const int p = static_cast<int>(cookie >> 32);
      const uint32_t i = static_cast<uint32_t>(cookie);
      ASSERT_TRUE(p >= 0 && p < c.size && p != c.rank) << "cookie " << cookie;
      ASSERT_LT(i, ps[p].next_send) << "kWriteDone for a write never issued";
      ASSERT_TRUE(ps[p].src_busy[i % kWindow]) << "second kWriteDone for write " << i;
      ps[p].src_busy[i % kWindow] = false;
    }
    c.done.clear();
  };
  const auto deadline = Clock::now() + 60s;
  while (!finished() && !::testing::Test::HasFailure()) {
    ASSERT_LT(Clock::now(), deadline) << "rank " << c.rank << ": stream did not finish";
    for (int p = 0; p < c.size; ++p) {
      if (p == c.rank) continue;
      PeerState& s = ps[p];
      while (s.next_send < count && s.next_send - s.acked < kWindow &&
             !s.src_busy[s.next_send % kWindow]) {
        const uint32_t i = s.next_send;
        const uint32_t slot = i % kWindow;
        const size_t n = size_of(i);
        const size_t src_off = (static_cast<size_t>(p) * kWindow + slot) * kSlotBytes;
        const size_t dst_off = (static_cast<size_t>(c.rank) * kWindow + slot) * kSlotBytes;
        for (size_t j = 0; j < n; ++j) src_base[src_off + j] = pattern(c.rank, i, j);
        const uint64_t cookie = (static_cast<uint64_t>(p) << 32) | i;
        Status st =
            c.t->write(*src.value(), src_off, *remote[p], dst_off, n, stream_tag(kData, i), cookie);
        if (st.code() == StatusCode::kBusy) break;
        ASSERT_TRUE(st.ok()) << st.to_string();
        s.src_busy[slot] = true;
        ++s.next_send;
        if (i % 7 == 3) c.notify(p, stream_tag(kMarker, i));
      }
    }
    if (c.pump() == 0) c.t->wait(1ms);
    absorb_done();
    while (!c.notes.empty()) {
      const TransportCompletion n = c.notes.front();
      c.notes.pop_front();
      ASSERT_TRUE(n.peer >= 0 && n.peer < c.size && n.peer != c.rank);
      PeerState& s = ps[n.peer];
      const uint32_t kind = n.tag >> 30, i = n.tag & 0x3fffffffu;
      if (kind == kData) {
        ASSERT_EQ(s.marker_pending, -1) << "rank " << c.rank << ": write " << i << " from rank "
                                        << n.peer << " overtook the marker of an earlier one";
        ASSERT_EQ(i, s.recv_expect)
            << "rank " << c.rank << ": writes from rank " << n.peer << " out of order";
        const size_t off = (static_cast<size_t>(n.peer) * kWindow + i % kWindow) * kSlotBytes;
        for (size_t j = 0; j < size_of(i); ++j) {
          if (dst_base[off + j] != pattern(n.peer, i, j)) {
            FAIL() << "rank " << c.rank << ": write " << i << " from rank " << n.peer
                   << " not visible when its tag arrived: byte " << j << " of " << size_of(i)
                   << " is " << int(dst_base[off + j]) << ", expected "
                   << int(pattern(n.peer, i, j));
          }
        }
        ++s.recv_expect;
        if (i % 7 == 3) s.marker_pending = i;
        c.notify(n.peer, stream_tag(kAck, i));
      } else if (kind == kMarker) {
        ASSERT_EQ(s.marker_pending, static_cast<int64_t>(i)) << "marker out of order";
        s.marker_pending = -1;
      } else if (kind == kAck) {
        ASSERT_EQ(i, s.acked) << "acks out of order";
        ++s.acked;
      } else {
        FAIL() << "unexpected tag " << n.tag;
      }
    }
  }
  if (::testing::Test::HasFailure()) return;
  // Every write's source came back exactly once.
  ASSERT_TRUE(c.pump_until([&] {
    absorb_done();
    for (const PeerState& s : ps) {
      if (std::count(s.src_busy.begin(), s.src_busy.end(), true) > 0) return false;
    }
    return true;
  })) << "rank "
      << c.rank << ": writes without kWriteDone";
  EXPECT_TRUE(c.errors.empty());
  c.barrier("stream-done");
}

// UCX-specific cases, over every Tls.
class UcxWorld : public ::testing::TestWithParam<Tls> {};
// The contract's own checks (tests/transport/transport_contract_test.cc) run over UCX's default
// transports in one process, which is shared memory; these run them between processes over TCP,
// where UCX emulates puts with messages that the target's progress serves and nothing is mapped.
class UcxOverTcp : public ::testing::TestWithParam<Tls> {};

}  // namespace eagercomm::test::ucx_test
