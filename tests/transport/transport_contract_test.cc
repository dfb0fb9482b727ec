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
//
// One program, several files by job: here writes and notifications (order, data first),
// kWriteDone and back-pressure, and the suite's instantiation over the backends;
// transport_contract_test_wait.cc: wait() and wake(); transport_contract_test_memory.cc: stores
// through mapped memory and regions; transport_contract_test_bad_input.cc: bad keys, offsets,
// peers and addresses; transport_contract_test_close.cc: close(). The fixture and the helpers:
// transport_contract_test.h.
#include "tests/transport/transport_contract_test.h"

namespace eagercomm::test::contract_test {
namespace {

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

INSTANTIATE_TEST_SUITE_P(Backends, TransportContract, ::testing::ValuesIn(registry_backends()),
                         test_name_of);

}  // namespace
}  // namespace eagercomm::test::contract_test
