// The progress engine: inline driving by the waiter, the progress thread, the hand-over
// between them, idle blocking instead of spinning, timeouts, close and exclusive access.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "runtime/engine.h"
#include "runtime/event_count.h"

namespace eagercomm {
namespace {

using namespace std::chrono_literals;

// Work items are a counter other threads add to; progress() takes them one at a time.
class FakeSource : public ProgressSource {
 public:
  int progress() override {
    calls.fetch_add(1, std::memory_order_relaxed);
    int64_t w = work.load(std::memory_order_acquire);
    if (w <= 0) return 0;
    work.fetch_sub(1, std::memory_order_acq_rel);
    done.fetch_add(1, std::memory_order_acq_rel);
    last_driver.store(std::this_thread::get_id());
    return 1;
  }
  void block(std::chrono::nanoseconds timeout) override {
    blocks.fetch_add(1);
    auto t = event.prepare_wait();
    if (work.load() > 0 || woken.exchange(false)) {
      event.cancel_wait();
      return;
    }
    event.commit_wait(t, timeout);
  }
  void wait_for_work(std::chrono::nanoseconds timeout) override { block(timeout); }
  void interrupt() override {
    woken.store(true);
    event.notify_all();
  }
  void add(int n) {
    work.fetch_add(n);
    event.notify_all();
  }

  std::atomic<int64_t> work{0};
  std::atomic<int64_t> done{0};
  std::atomic<int64_t> calls{0};
  std::atomic<int64_t> blocks{0};
  std::atomic<bool> woken{false};
  std::atomic<std::thread::id> last_driver{};
  EventCount event;
};

Engine::Clock::time_point in(std::chrono::nanoseconds d) { return Engine::Clock::now() + d; }

TEST(Engine, TheWaiterDrivesInline) {
  FakeSource src;
  Engine engine(src, EngineOptions{20us, 0});
  src.add(100);
  EXPECT_TRUE(engine.wait([&] { return src.done.load() == 100; }, in(30s)));
  EXPECT_EQ(src.last_driver.load(), std::this_thread::get_id());
}

TEST(Engine, WaitTimesOutWhenNothingHappens) {
  FakeSource src;
  Engine engine(src, EngineOptions{20us, 0});
  const auto t0 = Engine::Clock::now();
  EXPECT_FALSE(engine.wait([] { return false; }, in(50ms)));
  EXPECT_GE(Engine::Clock::now() - t0, 45ms);
}

TEST(Engine, IdleDriverBlocksInsteadOfSpinning) {
  FakeSource src;
  Engine engine(src, EngineOptions{20us, 0});
  EXPECT_FALSE(engine.wait([] { return false; }, in(300ms)));
  // Spinning for 300 ms would make millions of calls; blocking makes a handful.
  EXPECT_LT(src.calls.load(), 100000);
  EXPECT_GT(src.blocks.load(), 0);
  EXPECT_GT(engine.stats().blocks, 0u);
}

TEST(Engine, WorkArrivingWhileBlockedWakesTheDriver) {
  FakeSource src;
  Engine engine(src, EngineOptions{0us, 0});
  std::thread producer([&] {
    std::this_thread::sleep_for(30ms);
    src.add(1);
  });
  const auto t0 = Engine::Clock::now();
  EXPECT_TRUE(engine.wait([&] { return src.done.load() == 1; }, in(30s)));
  EXPECT_LT(Engine::Clock::now() - t0, 20s);
  producer.join();
}

TEST(Engine, ProgressThreadDrivesWithoutAnyWaiter) {
  FakeSource src;
  Engine engine(src, EngineOptions{20us, 0});
  engine.start_thread();
  EXPECT_TRUE(engine.has_thread());
  src.add(1000);
  const auto deadline = Engine::Clock::now() + 30s;
  while (src.done.load() < 1000 && Engine::Clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  EXPECT_EQ(src.done.load(), 1000);
  EXPECT_NE(src.last_driver.load(), std::this_thread::get_id());
  engine.stop_thread();
  EXPECT_FALSE(engine.has_thread());
}

TEST(Engine, AWaiterTakesTheTokenFromTheProgressThread) {
  FakeSource src;
  Engine engine(src, EngineOptions{20us, 0});
  engine.start_thread();
  std::this_thread::sleep_for(20ms);  // the thread is parked in block()
  for (int round = 0; round < 50; ++round) {
    const int64_t target = src.done.load() + 1;
    src.add(1);
    ASSERT_TRUE(engine.wait([&] { return src.done.load() >= target; }, in(30s)));
  }
  // Both threads drove at some point; what matters is that every wait returned promptly.
  engine.stop_thread();
}

TEST(Engine, ManyWaitersAndAProgressThreadNeverLoseWork) {
  FakeSource src;
  Engine engine(src, EngineOptions{5us, 0});
  engine.start_thread();
  std::vector<std::thread> waiters;
  std::atomic<int> ok{0};
  for (int t = 0; t < 4; ++t) {
    waiters.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        const int64_t target = src.done.load() + 1;
        src.add(1);
        if (engine.wait([&] { return src.done.load() >= target; }, in(60s))) ok++;
      }
    });
  }
  for (auto& w : waiters) w.join();
  EXPECT_EQ(ok.load(), 800);
  EXPECT_TRUE(engine.wait([&] { return src.work.load() == 0; }, in(30s)));
}

TEST(Engine, RunExclusiveGetsTheTokenFromABusyThread) {
  FakeSource src;
  Engine engine(src, EngineOptions{20us, 0});
  engine.start_thread();
  src.add(1 << 30);  // keeps the thread busy
  bool ran = false;
  engine.run_exclusive([&] { ran = true; });
  EXPECT_TRUE(ran);
  src.work.store(0);
  engine.stop_thread();
}

TEST(Engine, CloseReleasesWaitersAndStopsDriving) {
  FakeSource src;
  Engine engine(src, EngineOptions{20us, 0});
  engine.start_thread();
  std::atomic<bool> flag{false};
  std::thread waiter([&] { EXPECT_TRUE(engine.wait([&] { return flag.load(); }, in(60s))); });
  std::this_thread::sleep_for(20ms);
  engine.close([&] { flag.store(true); });
  waiter.join();
  EXPECT_TRUE(engine.closed());
  EXPECT_FALSE(engine.has_thread());
  const int64_t calls = src.calls.load();
  src.add(10);
  EXPECT_EQ(engine.try_progress(), 0);
  EXPECT_FALSE(engine.wait([&] { return src.done.load() == 10; }, in(20ms)));
  EXPECT_EQ(src.calls.load(), calls) << "a closed engine must not drive";
}

}  // namespace
}  // namespace eagercomm
