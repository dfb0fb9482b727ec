// MpscQueue and BoundedQueue: single-thread semantics and multi-thread exactly-once stress.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/bounded_queue.h"
#include "runtime/cpu_relax.h"
#include "runtime/mpsc_queue.h"

namespace eagercomm {
namespace {

constexpr int kProducers = 4;
constexpr uint32_t kItemsPerProducer = 200'000;

struct Item : MpscNode {
  int producer = 0;
  uint32_t seq = 0;
};

// Spin politely: the stress tests run more threads than the machine has cores.
void backoff(int& spins) {
  if (++spins < 64) {
    cpu_relax();
  } else {
    spins = 0;
    std::this_thread::yield();
  }
}

// ---------------------------------------------------------------------------------------------
// MpscQueue, one thread.

TEST(MpscQueueTest, StartsEmpty) {
  MpscQueue<Item> q;
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.pop(), nullptr);
  EXPECT_EQ(q.pop(), nullptr);  // Popping an empty queue does not disturb it.
  EXPECT_TRUE(q.empty());
}

TEST(MpscQueueTest, PopsInFifoOrder) {
  MpscQueue<Item> q;
  std::vector<Item> items(1000);
  for (uint32_t i = 0; i < items.size(); ++i) {
    items[i].seq = i;
    q.push(&items[i]);
    EXPECT_FALSE(q.empty());
  }
  for (uint32_t i = 0; i < items.size(); ++i) {
    Item* got = q.pop();
    ASSERT_NE(got, nullptr) << "at " << i;
    EXPECT_EQ(got, &items[i]);
  }
  EXPECT_EQ(q.pop(), nullptr);
  EXPECT_TRUE(q.empty());
}

TEST(MpscQueueTest, SingleNodeRoundTripsRepeatedly) {
  // Each pop of the last node re-inserts the internal stub; do that path many times, reusing
  // the same node as soon as it comes back.
  MpscQueue<Item> q;
  Item item;
  for (int i = 0; i < 10'000; ++i) {
    q.push(&item);
    EXPECT_FALSE(q.empty());
    ASSERT_EQ(q.pop(), &item) << "round " << i;
    EXPECT_TRUE(q.empty());
    ASSERT_EQ(q.pop(), nullptr);
  }
}

TEST(MpscQueueTest, InterleavedPushPopKeepsOrder) {
  MpscQueue<Item> q;
  std::vector<Item> items(64);
  for (uint32_t i = 0; i < items.size(); ++i) items[i].seq = i;
  // Keep between 0 and 3 nodes queued while cycling through the pool, so the head, the tail
  // and the stub meet in every arrangement.
  uint32_t next_push = 0;
  uint32_t next_pop = 0;
  for (int round = 0; round < 20'000; ++round) {
    const int pushes = round % 4;
    for (int k = 0; k < pushes; ++k) q.push(&items[next_push++ % items.size()]);
    const int pops = (round % 3 == 0) ? pushes + 1 : pushes;
    for (int k = 0; k < pops; ++k) {
      Item* got = q.pop();
      if (next_pop == next_push) {
        ASSERT_EQ(got, nullptr);
      } else {
        ASSERT_NE(got, nullptr);
        ASSERT_EQ(got->seq, next_pop++ % items.size());
      }
    }
    ASSERT_EQ(q.empty(), next_pop == next_push);
  }
}

TEST(MpscQueueTest, PopWaitsForAHalfFinishedPush) {
  // A producer pre-empted between its exchange on the head and its link store leaves the
  // previous node's mpsc_next null. Recreate that state deterministically by undoing the link
  // of a finished push, and check that the consumer neither skips nor corrupts anything while
  // it polls (several times) across the gap, and gets both nodes once the link lands.
  MpscQueue<Item> q;
  Item a;
  Item b;
  q.push(&a);
  q.push(&b);
  a.mpsc_next.store(nullptr, std::memory_order_relaxed);  // b's producer "has not linked yet".
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(q.pop(), nullptr) << "poll " << i;
    EXPECT_FALSE(q.empty()) << "a half-finished push must not look empty";
  }
  a.mpsc_next.store(&b, std::memory_order_release);  // The producer resumes.
  EXPECT_EQ(q.pop(), &a);
  EXPECT_EQ(q.pop(), &b);
  EXPECT_EQ(q.pop(), nullptr);
  EXPECT_TRUE(q.empty());
}

// ---------------------------------------------------------------------------------------------
// MpscQueue, four producers and one consumer.

TEST(MpscQueueTest, FourProducersEveryItemOnceInProducerOrder) {
  MpscQueue<Item> q;
  // Nodes hold an atomic, so they can not be copied: one array per producer.
  std::vector<std::unique_ptr<Item[]>> items;
  for (int p = 0; p < kProducers; ++p) items.push_back(std::make_unique<Item[]>(kItemsPerProducer));
  std::atomic<bool> go{false};
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      while (!go.load(std::memory_order_acquire)) cpu_relax();
      for (uint32_t i = 0; i < kItemsPerProducer; ++i) {
        Item& item = items[p][i];
        item.producer = p;
        item.seq = i;
        q.push(&item);
      }
    });
  }
  go.store(true, std::memory_order_release);

  std::vector<uint32_t> next(kProducers, 0);
  uint64_t received = 0;
  int spins = 0;
  bool ok = true;
  while (received < uint64_t{kProducers} * kItemsPerProducer && ok) {
    Item* got = q.pop();
    if (got == nullptr) {
      backoff(spins);
      continue;
    }
    // Per-producer FIFO, and (since each index is expected exactly once) no duplicates and
    // no losses: the counts below must all end at kItemsPerProducer.
    ok = got->producer >= 0 && got->producer < kProducers && got->seq == next[got->producer] &&
         got == &items[got->producer][got->seq];
    if (ok) ++next[got->producer];
    ++received;
  }
  for (auto& t : producers) t.join();
  ASSERT_TRUE(ok) << "out-of-order, duplicate or corrupt item after " << received << " items";
  for (int p = 0; p < kProducers; ++p) EXPECT_EQ(next[p], kItemsPerProducer) << "producer " << p;
  EXPECT_EQ(q.pop(), nullptr);
  EXPECT_TRUE(q.empty());
}

// ---------------------------------------------------------------------------------------------
// BoundedQueue, one thread.

TEST(BoundedQueueTest, CapacityRoundsUpToPowerOfTwoAtLeastTwo) {
  EXPECT_EQ(BoundedQueue<int>(0).capacity(), 2u);
  EXPECT_EQ(BoundedQueue<int>(1).capacity(), 2u);
  EXPECT_EQ(BoundedQueue<int>(2).capacity(), 2u);
  EXPECT_EQ(BoundedQueue<int>(3).capacity(), 4u);
  EXPECT_EQ(BoundedQueue<int>(5).capacity(), 8u);
  EXPECT_EQ(BoundedQueue<int>(1000).capacity(), 1024u);
  EXPECT_EQ(BoundedQueue<int>(1024).capacity(), 1024u);
  EXPECT_EQ(BoundedQueue<int>(1025).capacity(), 2048u);
}

TEST(BoundedQueueTest, EmptyPopFailsAndLeavesOutAlone) {
  BoundedQueue<int> q(4);
  int out = 42;
  EXPECT_FALSE(q.try_pop(out));
  EXPECT_EQ(out, 42);
  EXPECT_EQ(q.size_approx(), 0u);
}

TEST(BoundedQueueTest, FifoUntilFullThenRefuses) {
  BoundedQueue<int> q(5);  // Rounded to 8.
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(q.try_push(i)) << i;
    EXPECT_EQ(q.size_approx(), static_cast<size_t>(i + 1));
  }
  EXPECT_FALSE(q.try_push(100));
  EXPECT_EQ(q.size_approx(), 8u);
  int out = -1;
  ASSERT_TRUE(q.try_pop(out));
  EXPECT_EQ(out, 0);
  EXPECT_TRUE(q.try_push(8));  // One slot free again.
  EXPECT_FALSE(q.try_push(9));
  for (int i = 1; i <= 8; ++i) {
    ASSERT_TRUE(q.try_pop(out));
    EXPECT_EQ(out, i);
  }
  EXPECT_FALSE(q.try_pop(out));
  EXPECT_EQ(q.size_approx(), 0u);
}

TEST(BoundedQueueTest, FailedPushDoesNotConsumeAMoveOnlyValue) {
  BoundedQueue<std::unique_ptr<int>> q(2);
  ASSERT_TRUE(q.try_push(std::make_unique<int>(1)));
  ASSERT_TRUE(q.try_push(std::make_unique<int>(2)));
  auto third = std::make_unique<int>(3);
  EXPECT_FALSE(q.try_push(std::move(third)));
  ASSERT_NE(third, nullptr) << "a refused push must leave the value with the caller";
  EXPECT_EQ(*third, 3);

  std::unique_ptr<int> out;
  ASSERT_TRUE(q.try_pop(out));
  EXPECT_EQ(*out, 1);
  EXPECT_TRUE(q.try_push(std::move(third)));  // The retry succeeds with the same object.
  EXPECT_EQ(third, nullptr);
  ASSERT_TRUE(q.try_pop(out));
  EXPECT_EQ(*out, 2);
  ASSERT_TRUE(q.try_pop(out));
  EXPECT_EQ(*out, 3);
}

TEST(BoundedQueueTest, CopiesFromLvalues) {
  BoundedQueue<std::string> q(2);
  const std::string hello = "hello";
  ASSERT_TRUE(q.try_push(hello));
  EXPECT_EQ(hello, "hello");
  std::string out;
  ASSERT_TRUE(q.try_pop(out));
  EXPECT_EQ(out, "hello");
}

TEST(BoundedQueueTest, WrapsAroundManyTimes) {
  BoundedQueue<uint64_t> q(4);
  uint64_t next_push = 0;
  uint64_t next_pop = 0;
  // Vary the fill level (0..4) so the slots are reused at every offset, ~25k laps of the ring.
  for (int round = 0; round < 50'000; ++round) {
    const int fill = round % 5;
    while (next_push - next_pop < static_cast<uint64_t>(fill)) {
      ASSERT_TRUE(q.try_push(next_push++));
    }
    if (fill == 4) {
      ASSERT_FALSE(q.try_push(uint64_t{999}));
    }
    ASSERT_EQ(q.size_approx(), next_push - next_pop);
    while (next_pop < next_push) {
      uint64_t out = 0;
      ASSERT_TRUE(q.try_pop(out));
      ASSERT_EQ(out, next_pop++);
    }
  }
  EXPECT_GT(next_push / q.capacity(), 20'000u);
}

struct Counted {
  static inline std::atomic<int> live{0};
  int value = 0;
  explicit Counted(int v) : value(v) { ++live; }
  Counted(Counted&& o) noexcept : value(o.value) { ++live; }
  Counted& operator=(Counted&& o) noexcept {
    value = o.value;
    return *this;
  }
  ~Counted() { --live; }
};

TEST(BoundedQueueTest, HoldsNonDefaultConstructibleValuesAndDestroysLeftovers) {
  Counted::live = 0;
  {
    BoundedQueue<Counted> q(8);
    EXPECT_EQ(Counted::live, 0) << "empty slots must not hold objects";
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(q.try_push(Counted(i)));
    EXPECT_EQ(Counted::live, 5);
    Counted out(-1);
    ASSERT_TRUE(q.try_pop(out));
    EXPECT_EQ(out.value, 0);
    EXPECT_EQ(Counted::live, 5);  // 4 queued + out.
  }
  EXPECT_EQ(Counted::live, 0) << "values left in the queue must be destroyed with it";
}

// ---------------------------------------------------------------------------------------------
// BoundedQueue, four producers and two consumers.

TEST(BoundedQueueTest, FourProducersTwoConsumersEveryItemExactlyOnce) {
  constexpr int kConsumers = 2;
  constexpr uint64_t kTotal = uint64_t{kProducers} * kItemsPerProducer;
  BoundedQueue<uint64_t> q(64);  // Small: producers hit "full" and consumers "empty" often.
  std::atomic<bool> go{false};
  std::atomic<uint64_t> consumed{0};

  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      while (!go.load(std::memory_order_acquire)) cpu_relax();
      int spins = 0;
      for (uint32_t i = 0; i < kItemsPerProducer; ++i) {
        const uint64_t item = (uint64_t(p) << 32) | i;
        while (!q.try_push(item)) backoff(spins);
      }
    });
  }

  // Each consumer records what it got; per consumer, each producer's items must rise.
  std::vector<std::vector<uint8_t>> seen(kConsumers, std::vector<uint8_t>(kTotal, 0));
  std::vector<int> order_errors(kConsumers, 0);
  std::vector<std::thread> consumers;
  for (int c = 0; c < kConsumers; ++c) {
    consumers.emplace_back([&, c] {
      std::vector<int64_t> last(kProducers, -1);
      int spins = 0;
      while (consumed.load(std::memory_order_relaxed) < kTotal) {
        uint64_t item = 0;
        if (!q.try_pop(item)) {
          backoff(spins);
          continue;
        }
        consumed.fetch_add(1, std::memory_order_relaxed);
        const uint64_t p = item >> 32;
        const uint64_t i = item & 0xffffffffu;
        if (p >= kProducers || i >= kItemsPerProducer || static_cast<int64_t>(i) <= last[p]) {
          ++order_errors[c];
          continue;
        }
        last[p] = static_cast<int64_t>(i);
        ++seen[c][p * kItemsPerProducer + i];
      }
    });
  }
  go.store(true, std::memory_order_release);
  for (auto& t : producers) t.join();
  for (auto& t : consumers) t.join();

  for (int c = 0; c < kConsumers; ++c) EXPECT_EQ(order_errors[c], 0) << "consumer " << c;
  uint64_t missing = 0;
  uint64_t duplicated = 0;
  for (uint64_t k = 0; k < kTotal; ++k) {
    const int n = seen[0][k] + seen[1][k];
    missing += n == 0;
    duplicated += n > 1;
  }
  EXPECT_EQ(missing, 0u);
  EXPECT_EQ(duplicated, 0u);
  EXPECT_EQ(consumed.load(), kTotal);
  uint64_t out = 0;
  EXPECT_FALSE(q.try_pop(out));
  EXPECT_EQ(q.size_approx(), 0u);
}

}  // namespace
}  // namespace eagercomm
