// The transport contract (tests/transport/transport_contract_test.cc), close(): operations
// end, nothing written just before is lost, a closed peer is reported as left, the others
// keep working.
#include "tests/transport/transport_contract_test.h"

namespace eagercomm::test::contract_test {
namespace {

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

}  // namespace
}  // namespace eagercomm::test::contract_test
