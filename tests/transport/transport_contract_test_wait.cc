// The transport contract (tests/transport/transport_contract_test.cc), wait() and wake(): no
// wake-up lost to a notification racing the sleep, a waiter that does not poll misses nothing,
// wake() and notifications end a wait, wake_peer() ends the peer's.
#include "tests/transport/transport_contract_test.h"

namespace eagercomm::test::contract_test {
namespace {

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

}  // namespace
}  // namespace eagercomm::test::contract_test
