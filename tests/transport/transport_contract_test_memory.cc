// The transport contract (tests/transport/transport_contract_test.cc), memory: stores through
// mapped memory published by notify(), regions zero-filled, importable and writable, write()
// and notify() that return while the target does not poll.
#include "tests/transport/transport_contract_test.h"

namespace eagercomm::test::contract_test {
namespace {

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

}  // namespace
}  // namespace eagercomm::test::contract_test
