// EventCount: wake-ups, timeouts, signals, a 100k-handoff ping-pong, the engine's
// queue-plus-doorbell pattern, and use between two processes through shared memory.
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/event_count.h"
#include "runtime/mpsc_queue.h"

namespace eagercomm {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

// Generous: only a broken EventCount (or a machine stalled for this long) reaches it.
constexpr nanoseconds kPatience = seconds(20);

// The documented consumer pattern: returns true once pred() holds, false if a single wait
// ran into `timeout` with pred() still false.
template <class Pred>
bool wait_until(EventCount& ec, Pred pred, nanoseconds timeout) {
  while (!pred()) {
    const EventCount::Ticket ticket = ec.prepare_wait();
    if (pred()) {
      ec.cancel_wait();
      return true;
    }
    if (!ec.commit_wait(ticket, timeout) && !pred()) return false;
  }
  return true;
}

// Polls (sleeping) until the EventCount has `n` announced waiters; false after kPatience.
bool await_waiters(const EventCount& ec, uint32_t n) {
  const auto deadline = Clock::now() + kPatience;
  while (ec.waiters() != n) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

TEST(EventCountTest, IsAPlainSharedMemoryObject) {
  EXPECT_TRUE(std::is_standard_layout_v<EventCount>);
  EXPECT_TRUE(std::is_trivially_destructible_v<EventCount>);
  EXPECT_EQ(sizeof(EventCount), 8u);
  EXPECT_TRUE(std::atomic<uint32_t>::is_always_lock_free);
  EventCount ec;
  EXPECT_EQ(ec.waiters(), 0u);
}

TEST(EventCountTest, PrepareAndCancelCountWaiters) {
  EventCount ec;
  (void)ec.prepare_wait();
  EXPECT_EQ(ec.waiters(), 1u);
  (void)ec.prepare_wait();  // As if from a second thread.
  EXPECT_EQ(ec.waiters(), 2u);
  ec.cancel_wait();
  ec.cancel_wait();
  EXPECT_EQ(ec.waiters(), 0u);
}

TEST(EventCountTest, NotifyWithoutWaitersLeavesTheSequenceAlone) {
  // The cheap path: no waiter, so no bump (and no futex call).
  EventCount ec;
  const EventCount::Ticket before = ec.prepare_wait();
  ec.cancel_wait();
  for (int i = 0; i < 1000; ++i) ec.notify_all();
  const EventCount::Ticket after = ec.prepare_wait();
  ec.cancel_wait();
  EXPECT_EQ(before, after);
}

TEST(EventCountTest, NotifyAfterPrepareMakesCommitReturnAtOnce) {
  EventCount ec;
  const EventCount::Ticket ticket = ec.prepare_wait();
  ec.notify_all();
  EXPECT_TRUE(ec.commit_wait(ticket, nanoseconds::zero()));
  EXPECT_EQ(ec.waiters(), 0u);

  const EventCount::Ticket again = ec.prepare_wait();
  EXPECT_NE(again, ticket);
  ec.notify_all();
  const auto start = Clock::now();
  EXPECT_TRUE(ec.commit_wait(again, kPatience));
  EXPECT_LT(Clock::now() - start, seconds(10)) << "a stale ticket must not block";
}

TEST(EventCountTest, NotifyBeforePrepareDoesNotCount) {
  EventCount ec;
  const EventCount::Ticket first = ec.prepare_wait();
  ec.notify_all();
  EXPECT_TRUE(ec.commit_wait(first, nanoseconds::zero()));
  // That notify is history: a new ticket must wait for a new notify.
  const EventCount::Ticket second = ec.prepare_wait();
  EXPECT_FALSE(ec.commit_wait(second, milliseconds(20)));
  EXPECT_EQ(ec.waiters(), 0u);
}

TEST(EventCountTest, ZeroTimeoutOnlyPolls) {
  EventCount ec;
  const auto start = Clock::now();
  EXPECT_FALSE(ec.commit_wait(ec.prepare_wait(), nanoseconds::zero()));
  EXPECT_LT(Clock::now() - start, seconds(5));
  EXPECT_EQ(ec.waiters(), 0u);
}

TEST(EventCountTest, TimeoutReturnsFalseNoEarlierThanAsked) {
  EventCount ec;
  const auto start = Clock::now();
  EXPECT_FALSE(ec.commit_wait(ec.prepare_wait(), milliseconds(100)));
  const auto elapsed = Clock::now() - start;
  EXPECT_GE(elapsed, milliseconds(100));
  EXPECT_LT(elapsed, seconds(10));
  EXPECT_EQ(ec.waiters(), 0u);
}

TEST(EventCountTest, HugeTimeoutDoesNotOverflow) {
  // nanoseconds::max() - 1 must not wrap the deadline into the past.
  EventCount ec;
  const EventCount::Ticket ticket = ec.prepare_wait();
  std::atomic<bool> returned{false};
  bool woken = false;
  std::thread waiter([&] {
    woken = ec.commit_wait(ticket, nanoseconds::max() - nanoseconds(1));
    returned.store(true);
  });
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_FALSE(returned.load()) << "returned without a notify";
  ec.notify_all();
  waiter.join();
  EXPECT_TRUE(woken);
}

TEST(EventCountTest, WaiterForeverIsWokenByNotify) {
  EventCount ec;
  std::atomic<bool> flag{false};
  std::atomic<bool> returned{false};
  bool woken = false;
  std::thread waiter([&] {
    const EventCount::Ticket ticket = ec.prepare_wait();
    if (flag.load(std::memory_order_acquire)) {
      ec.cancel_wait();
      woken = true;
    } else {
      woken = ec.commit_wait(ticket, nanoseconds(-1));  // Negative: no limit.
    }
    returned.store(true);
  });
  EXPECT_TRUE(await_waiters(ec, 1));
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_FALSE(returned.load()) << "an unbounded wait returned without a notify";
  flag.store(true, std::memory_order_release);
  ec.notify_all();
  waiter.join();
  EXPECT_TRUE(woken);
  EXPECT_EQ(ec.waiters(), 0u);
}

TEST(EventCountTest, OneNotifyWakesEveryWaiter) {
  constexpr int kWaiters = 4;
  EventCount ec;
  std::atomic<bool> flag{false};
  std::atomic<int> woken{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.emplace_back([&] {
      const EventCount::Ticket ticket = ec.prepare_wait();
      if (flag.load(std::memory_order_acquire)) {
        ec.cancel_wait();
      } else if (!ec.commit_wait(ticket, kPatience)) {
        return;
      }
      woken.fetch_add(1);
    });
  }
  EXPECT_TRUE(await_waiters(ec, kWaiters));
  flag.store(true, std::memory_order_release);
  ec.notify_all();
  for (auto& t : waiters) t.join();
  EXPECT_EQ(woken.load(), kWaiters);
  EXPECT_EQ(ec.waiters(), 0u);
}

// Signals make FUTEX_WAIT fail with EINTR; the wait must go on with the time it has left.
void ignore_signal(int) {}

class SignalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    struct sigaction action {};
    action.sa_handler = ignore_signal;  // No SA_RESTART: the futex call sees EINTR.
    sigemptyset(&action.sa_mask);
    ASSERT_EQ(sigaction(SIGUSR1, &action, &old_), 0);
  }
  void TearDown() override { sigaction(SIGUSR1, &old_, nullptr); }

  struct sigaction old_ {};
};

TEST_F(SignalTest, SignalsDoNotEndAWaitEarly) {
  EventCount ec;
  std::atomic<bool> returned{false};
  bool woken = true;
  const auto start = Clock::now();
  std::thread waiter([&] {
    woken = ec.commit_wait(ec.prepare_wait(), milliseconds(300));
    returned.store(true);
  });
  EXPECT_TRUE(await_waiters(ec, 1));
  for (int i = 0; i < 5 && !returned.load(); ++i) {
    pthread_kill(waiter.native_handle(), SIGUSR1);
    std::this_thread::sleep_for(milliseconds(20));
  }
  waiter.join();
  EXPECT_FALSE(woken) << "a signal is not a notify";
  EXPECT_GE(Clock::now() - start, milliseconds(300));
}

TEST_F(SignalTest, SignalledUnboundedWaiterStillWakesOnNotify) {
  EventCount ec;
  std::atomic<bool> returned{false};
  bool woken = false;
  std::thread waiter([&] {
    woken = ec.commit_wait(ec.prepare_wait(), nanoseconds::max());
    returned.store(true);
  });
  EXPECT_TRUE(await_waiters(ec, 1));
  for (int i = 0; i < 5; ++i) {
    pthread_kill(waiter.native_handle(), SIGUSR1);
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_FALSE(returned.load()) << "an unbounded wait returned on a signal";
  ec.notify_all();
  waiter.join();
  EXPECT_TRUE(woken);
}

// Two threads hand a ball back and forth; each blocks (never spins) until it is its turn.
TEST(EventCountTest, PingPongHundredThousandHandoffs) {
  constexpr uint64_t kHandoffs = 100'000;
  std::atomic<uint64_t> ball{0};  // Even: side 0 holds it; odd: side 1.
  std::atomic<bool> failed{false};
  EventCount doorbell[2];

  auto play = [&](int side) {
    for (;;) {
      const bool mine = wait_until(
          doorbell[side],
          [&] {
            const uint64_t b = ball.load(std::memory_order_acquire);
            return failed.load() || b >= kHandoffs || b % 2 == static_cast<uint64_t>(side);
          },
          kPatience);
      if (!mine) {
        failed.store(true);
        doorbell[1 - side].notify_all();
        return;
      }
      const uint64_t b = ball.load(std::memory_order_acquire);
      if (failed.load() || b >= kHandoffs) return;
      ball.store(b + 1, std::memory_order_release);
      doorbell[1 - side].notify_all();
    }
  };
  const auto start = Clock::now();
  std::thread other(play, 1);
  play(0);
  other.join();
  const auto elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_FALSE(failed.load()) << "a side waited " << kPatience.count() << " ns for its turn";
  EXPECT_EQ(ball.load(), kHandoffs);
  RecordProperty("handoffs_per_second", static_cast<int>(kHandoffs / elapsed));
}

// The progress engine's pattern: producers push and ring; the consumer drains, and blocks
// only after a re-check. A lost wake-up shows up as a wait that times out.
TEST(EventCountTest, QueueAndDoorbellLoseNoWakeUp) {
  constexpr int kProducers = 4;
  constexpr uint32_t kItems = 50'000;
  struct Item : MpscNode {
    uint32_t producer = 0;
  };
  MpscQueue<Item> queue;
  EventCount doorbell;
  std::vector<std::unique_ptr<Item[]>> items;
  for (int p = 0; p < kProducers; ++p) items.push_back(std::make_unique<Item[]>(kItems));
  std::vector<std::thread> producers;
  for (uint32_t p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (uint32_t i = 0; i < kItems; ++i) {
        items[p][i].producer = p;
        queue.push(&items[p][i]);
        doorbell.notify_all();
        if (i % 64 == 0) std::this_thread::yield();  // Let the consumer go idle now and then.
      }
    });
  }
  uint64_t received = 0;
  uint64_t timeouts = 0;
  while (received < uint64_t{kProducers} * kItems) {
    if (queue.pop() != nullptr) {
      ++received;
      continue;
    }
    const EventCount::Ticket ticket = doorbell.prepare_wait();
    if (!queue.empty()) {
      doorbell.cancel_wait();
      continue;
    }
    if (!doorbell.commit_wait(ticket, kPatience) && queue.empty()) {
      ++timeouts;
      break;
    }
  }
  for (auto& t : producers) t.join();
  EXPECT_EQ(timeouts, 0u) << "the consumer slept through a push";
  EXPECT_EQ(received, uint64_t{kProducers} * kItems);
  EXPECT_TRUE(queue.empty());
}

// ---------------------------------------------------------------------------------------------
// Between processes: the EventCount lives in a MAP_SHARED anonymous mapping made before fork.

struct SharedState {
  EventCount to_child;
  EventCount to_parent;
  std::atomic<uint32_t> flag{0};
  std::atomic<uint64_t> ball{0};
};

class SharedMapping {
 public:
  SharedMapping() {
    void* p = mmap(nullptr, sizeof(SharedState), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                   -1, 0);
    if (p != MAP_FAILED) state_ = std::construct_at(static_cast<SharedState*>(p));
  }
  ~SharedMapping() {
    if (state_ != nullptr) munmap(state_, sizeof(SharedState));
  }
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;
  SharedState* get() const { return state_; }

 private:
  SharedState* state_ = nullptr;
};

// Waits for `pid` to exit for at most kPatience; kills it after that. Returns the wait status,
// or -1 when it had to be killed.
int reap(pid_t pid) {
  const auto deadline = Clock::now() + kPatience;
  int status = 0;
  while (Clock::now() < deadline) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0) return -1;
    std::this_thread::sleep_for(milliseconds(1));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

TEST(EventCountProcessTest, ChildBlockedInWaitIsWokenByParent) {
  SharedMapping mapping;
  SharedState* shared = mapping.get();
  ASSERT_NE(shared, nullptr) << "mmap: " << std::strerror(errno);

  const pid_t pid = fork();
  ASSERT_GE(pid, 0) << "fork: " << std::strerror(errno);
  if (pid == 0) {
    // The child: block until the parent raises the flag. Exit 0 when woken, 1 on timeout.
    const bool woken = wait_until(
        shared->to_child, [&] { return shared->flag.load(std::memory_order_acquire) != 0; },
        kPatience);
    _exit(woken ? 0 : 1);
  }
  // Raise the flag only once the child has announced itself, so the wake-up really has to
  // cross the process boundary through the futex.
  const bool child_waits = await_waiters(shared->to_child, 1);
  std::this_thread::sleep_for(milliseconds(20));
  shared->flag.store(1, std::memory_order_release);
  shared->to_child.notify_all();
  const int status = reap(pid);
  ASSERT_TRUE(child_waits) << "the child never started waiting";
  ASSERT_NE(status, -1) << "the child did not exit (never woken)";
  ASSERT_TRUE(WIFEXITED(status)) << "child status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child timed out instead of being woken";
}

TEST(EventCountProcessTest, PingPongBetweenProcesses) {
  constexpr uint64_t kHandoffs = 2'000;
  SharedMapping mapping;
  SharedState* shared = mapping.get();
  ASSERT_NE(shared, nullptr) << "mmap: " << std::strerror(errno);

  // Side 0 (parent) moves the ball from even to odd, side 1 (child) from odd to even.
  auto play = [shared](int side, EventCount& mine, EventCount& theirs) {
    for (;;) {
      const bool ok = wait_until(
          mine,
          [&] {
            const uint64_t b = shared->ball.load(std::memory_order_acquire);
            return b >= kHandoffs || b % 2 == static_cast<uint64_t>(side);
          },
          kPatience);
      if (!ok) return false;
      const uint64_t b = shared->ball.load(std::memory_order_acquire);
      if (b >= kHandoffs) return true;
      shared->ball.store(b + 1, std::memory_order_release);
      theirs.notify_all();
    }
  };
  const pid_t pid = fork();
  ASSERT_GE(pid, 0) << "fork: " << std::strerror(errno);
  if (pid == 0) _exit(play(1, shared->to_child, shared->to_parent) ? 0 : 1);
  const bool parent_ok = play(0, shared->to_parent, shared->to_child);
  const int status = reap(pid);
  EXPECT_TRUE(parent_ok) << "the parent timed out waiting for its turn";
  ASSERT_NE(status, -1) << "the child did not exit";
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child timed out waiting for its turn";
  EXPECT_EQ(shared->ball.load(), kHandoffs);
}

}  // namespace
}  // namespace eagercomm
