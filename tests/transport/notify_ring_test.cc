// The notification-ring module (transport/notify_ring/) that shm and ucx share: push/pop order,
// wrap-around, a full ring, a corrupt one, the ring block's layout (a wire and memory format
// between ranks: pinned), and the sleeper rule: a receiver asleep is woken by a push from another
// thread, both with ucx's Sleepers word and with shm's EventCount.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/event_count.h"
#include "transport/notify_ring/notify_ring.h"
#include "transport/notify_ring/ring_block.h"
#include "transport/notify_ring/sleepers.h"

namespace eagercomm {
namespace {

using notify_ring::Consumer;
using notify_ring::Producer;
using notify_ring::Room;

// Generous: only a lost wake-up (or a machine stalled this long) reaches it.
constexpr auto kPatience = std::chrono::seconds(20);

// Zero-filled, 64-aligned memory, as a shared-memory segment is.
struct Memory {
  explicit Memory(size_t bytes)
      : bytes(bytes), base(static_cast<uint8_t*>(std::aligned_alloc(64, bytes))) {
    std::memset(base, 0, bytes);
  }
  ~Memory() { std::free(base); }
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;
  size_t bytes;
  uint8_t* base;
};

// One ring of `capacity` entries with its producer and consumer.
struct Ring {
  explicit Ring(uint32_t capacity)
      : memory(notify_ring::ring_bytes(capacity)),
        producer(memory.base, capacity),
        consumer(memory.base, capacity) {
    notify_ring::init(memory.base, capacity);
  }
  Memory memory;
  Producer producer;
  Consumer consumer;
};

TEST(NotifyRing, PopsInPushOrder) {
  Ring r(16);
  for (uint32_t tag = 100; tag < 110; ++tag) {
    ASSERT_EQ(r.producer.room(), Room::kOk);
    r.producer.push(tag);
  }
  EXPECT_TRUE(r.consumer.maybe_nonempty());
  for (uint32_t want = 100; want < 110; ++want) {
    uint32_t tag = 0;
    ASSERT_EQ(r.consumer.try_pop(tag), 1);
    EXPECT_EQ(tag, want);
  }
  uint32_t tag = 0;
  EXPECT_EQ(r.consumer.try_pop(tag), 0);
  r.consumer.publish();
  EXPECT_FALSE(r.consumer.maybe_nonempty());
}

TEST(NotifyRing, WrapsAroundManyLaps) {
  constexpr uint32_t kCapacity = 16;
  Ring r(kCapacity);
  uint32_t next_push = 0;
  uint32_t next_pop = 0;
  // Uneven batches, so that pushes and pops meet every position of the ring on many laps.
  for (int round = 0; round < 200; ++round) {
    const uint32_t batch = 1 + static_cast<uint32_t>(round) % kCapacity;
    for (uint32_t i = 0; i < batch; ++i) {
      ASSERT_EQ(r.producer.room(), Room::kOk) << "round " << round;
      r.producer.push(next_push++);
    }
    uint32_t tag = 0;
    while (r.consumer.try_pop(tag) == 1) ASSERT_EQ(tag, next_pop++);
    r.consumer.publish();
    ASSERT_EQ(next_pop, next_push);
  }
  EXPECT_GT(next_push, 20 * kCapacity);
}

TEST(NotifyRing, FullRingRefusesUntilTheConsumerPublishes) {
  constexpr uint32_t kCapacity = 16;
  Ring r(kCapacity);
  for (uint32_t i = 0; i < kCapacity; ++i) {
    ASSERT_EQ(r.producer.room(), Room::kOk);
    r.producer.push(i);
  }
  EXPECT_EQ(r.producer.room(), Room::kFull);
  // Popped but not yet handed back: still full (the producer must not overwrite it).
  uint32_t tag = 0;
  ASSERT_EQ(r.consumer.try_pop(tag), 1);
  EXPECT_EQ(tag, 0u);
  EXPECT_EQ(r.producer.room(), Room::kFull);
  r.consumer.publish();
  EXPECT_EQ(r.producer.room(), Room::kOk);
  r.producer.push(kCapacity);
  EXPECT_EQ(r.producer.room(), Room::kFull);
  for (uint32_t want = 1; want <= kCapacity; ++want) {
    ASSERT_EQ(r.consumer.try_pop(tag), 1);
    EXPECT_EQ(tag, want);
  }
}

TEST(NotifyRing, ImpossibleIndicesAreCorruptNotFollowed) {
  Ring r(16);
  r.producer.push(7);
  r.producer.push(8);
  // A head beyond what was pushed.
  Ring scribbled_head(16);
  for (int i = 0; i < 16; ++i) scribbled_head.producer.push(static_cast<uint32_t>(i));
  reinterpret_cast<std::atomic<uint64_t>*>(scribbled_head.memory.base)->store(1000);
  EXPECT_EQ(scribbled_head.producer.room(), Room::kCorrupt);
  // An entry stamped with a sequence that is neither ready nor one lap behind.
  auto* entries = reinterpret_cast<std::atomic<uint64_t>*>(r.memory.base + 64);
  entries[0].store(notify_ring::make_entry(5, 99));
  uint32_t tag = 0;
  EXPECT_EQ(r.consumer.try_pop(tag), -1);
}

TEST(NotifyRingBlock, LayoutIsPinned) {
  // Ranks of one job lay out and read each other's blocks: these numbers are a format.
  EXPECT_EQ(notify_ring::ring_bytes(16), 64u + 16 * 8);
  EXPECT_EQ(notify_ring::ring_bytes(1024), 64u + 1024 * 8);
  EXPECT_EQ(notify_ring::ring_offset(64, 0, 16), 64u);
  EXPECT_EQ(notify_ring::ring_offset(64, 3, 16), 64u + 3 * 192);
  EXPECT_EQ(notify_ring::ring_offset(192, 2, 64), 192u + 2 * (64 + 512));
  EXPECT_EQ(notify_ring::block_bytes(64, 4, 16), 64u + 4 * 192);
  EXPECT_EQ(notify_ring::make_entry(0, 0xabcd), (uint64_t{1} << 32) | 0xabcd);
  EXPECT_EQ(notify_ring::make_entry(0xffffffffull, 5), uint64_t{5});  // sequence wraps to 0
  EXPECT_EQ(sizeof(notify_ring::Sleepers), 64u);
  // Entries per sender for a mailbox of `slots` slots: at least 64, 4 * slots + 64 rounded up
  // to a power of two.
  EXPECT_EQ(notify_ring::capacity_for(0), 64u);
  EXPECT_EQ(notify_ring::capacity_for(16), 128u);
  EXPECT_EQ(notify_ring::capacity_for(64), 512u);
  EXPECT_EQ(notify_ring::capacity_for(1u << 30), notify_ring::kMaxCapacity);
  EXPECT_TRUE(notify_ring::valid_capacity(notify_ring::capacity_for(100)));
  EXPECT_FALSE(notify_ring::valid_capacity(48));
  EXPECT_FALSE(notify_ring::valid_capacity(8));
}

TEST(NotifyRingBlock, EachSenderHasItsOwnRingAndDrainKeepsOrder) {
  constexpr size_t kHeader = 64;
  constexpr int kWorld = 3;
  constexpr uint32_t kCapacity = 16;
  Memory block(notify_ring::block_bytes(kHeader, kWorld, kCapacity));
  notify_ring::init_rings(block.base, kHeader, kWorld, kCapacity);
  std::vector<Producer> producers;
  std::vector<Consumer> consumers;
  for (int s = 0; s < kWorld; ++s) {
    producers.push_back(notify_ring::producer_at(block.base, kHeader, s, kCapacity));
    consumers.push_back(notify_ring::consumer_at(block.base, kHeader, s, kCapacity));
  }
  for (uint32_t i = 0; i < 5; ++i) producers[1].push(100 + i);
  producers[2].push(200);
  std::vector<TransportCompletion> out(3);
  // Sender 0 pushed nothing; sender 1's five come three at a time (the room in `out`).
  notify_ring::Drained d = notify_ring::drain(consumers[0], 0, out);
  EXPECT_EQ(d.count, 0u);
  EXPECT_FALSE(d.corrupt);
  d = notify_ring::drain(consumers[1], 1, out);
  ASSERT_EQ(d.count, 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(out[i].kind, TransportCompletion::Kind::kNotify);
    EXPECT_EQ(out[i].peer, 1);
    EXPECT_EQ(out[i].tag, 100 + i);
    EXPECT_EQ(out[i].cookie, 0u);
  }
  d = notify_ring::drain(consumers[1], 1, out);
  ASSERT_EQ(d.count, 2u);
  EXPECT_EQ(out[0].tag, 103u);
  EXPECT_EQ(out[1].tag, 104u);
  d = notify_ring::drain(consumers[2], 2, out);
  ASSERT_EQ(d.count, 1u);
  EXPECT_EQ(out[0].peer, 2);
  EXPECT_EQ(out[0].tag, 200u);
  // drain() handed the entries back: sender 1 has its whole ring again.
  for (uint32_t i = 0; i < kCapacity; ++i) {
    ASSERT_EQ(producers[1].room(), Room::kOk);
    producers[1].push(i);
  }
  EXPECT_EQ(producers[1].room(), Room::kFull);
}

TEST(NotifyRingBlock, DrainReportsACorruptRingWithRoomLeft) {
  Memory block(notify_ring::block_bytes(64, 1, 16));
  notify_ring::init_rings(block.base, 64, 1, 16);
  Producer producer = notify_ring::producer_at(block.base, 64, 0, 16);
  Consumer consumer = notify_ring::consumer_at(block.base, 64, 0, 16);
  producer.push(1);
  auto* entries = reinterpret_cast<std::atomic<uint64_t>*>(block.base + 64 + 64);
  entries[1].store(notify_ring::make_entry(9, 2));  // position 1 stamped as position 9
  std::vector<TransportCompletion> out(4);
  const notify_ring::Drained d = notify_ring::drain(consumer, 0, out);
  EXPECT_EQ(d.count, 1u);
  EXPECT_EQ(out[0].tag, 1u);
  EXPECT_TRUE(d.corrupt);
  EXPECT_LT(d.count, out.size());
}

// A receiver thread that takes `total` tags from one ring, sleeping whenever the ring is empty,
// while the test's thread pushes them in bursts. `sleep` follows the sleeper rule with its
// word and returns false when it slept for kPatience (a lost wake-up); `wake` is the
// producer's side, called after every push.
template <class Sleep, class Wake>
void run_sleeper_handoff(uint32_t total, Sleep sleep, Wake wake) {
  constexpr uint32_t kCapacity = 64;
  Ring r(kCapacity);
  std::atomic<uint32_t> received{0};
  std::atomic<bool> lost{false};
  std::atomic<uint32_t> sleeps{0};
  std::thread receiver([&] {
    uint32_t expected = 0;
    while (expected < total && !lost.load()) {
      uint32_t tag = 0;
      bool any = false;
      while (r.consumer.try_pop(tag) == 1) {
        if (tag != expected) ADD_FAILURE() << "tag " << tag << ", expected " << expected;
        ++expected;
        any = true;
      }
      if (any) {
        r.consumer.publish();
        received.store(expected);
        continue;
      }
      sleeps.fetch_add(1, std::memory_order_relaxed);
      if (!sleep(r.consumer)) lost.store(true);
    }
  });
  for (uint32_t tag = 0; tag < total && !lost.load(); ++tag) {
    while (r.producer.room() != Room::kOk) std::this_thread::yield();
    r.producer.push(tag);
    wake();
    // Bursts of a few tags, then a pause long enough for the receiver to fall asleep.
    if (tag % 7 == 6) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  receiver.join();
  EXPECT_FALSE(lost.load()) << "the receiver slept through a push";
  EXPECT_EQ(received.load(), total);
  EXPECT_GT(sleeps.load(), 0u) << "the receiver never slept: nothing was tested";
}

// ucx's receiver: announces itself in Sleepers, looks at its rings, sleeps on an eventfd that a
// store cannot fire; the producer that finds sleepers signals the fd (ucx sends kWake).
TEST(NotifyRingSleepers, ReceiverOnAnEventFdIsWokenByAPush) {
  notify_ring::Sleepers sleepers{};
  const int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  ASSERT_GE(fd, 0);
  run_sleeper_handoff(
      20000,
      [&](const Consumer& ring) {
        sleepers.announce();
        bool woken = true;
        if (!ring.maybe_nonempty()) {
          struct pollfd p = {fd, POLLIN, 0};
          const int ms = static_cast<int>(
              std::chrono::duration_cast<std::chrono::milliseconds>(kPatience).count());
          woken = ::poll(&p, 1, ms) > 0;
          uint64_t drained = 0;
          while (::read(fd, &drained, sizeof(drained)) > 0) {
          }
        }
        sleepers.withdraw();
        return woken;
      },
      [&] {
        if (sleepers.any()) {
          const uint64_t one = 1;
          ASSERT_EQ(::write(fd, &one, sizeof(one)), static_cast<ssize_t>(sizeof(one)));
        }
      });
  ::close(fd);
}

// shm's receiver: the EventCount in its control block is the word; push() rings it.
TEST(NotifyRingSleepers, ReceiverOnAnEventCountIsWokenByAPush) {
  EventCount event;
  run_sleeper_handoff(
      20000,
      [&](const Consumer& ring) {
        const EventCount::Ticket ticket = event.prepare_wait();
        if (ring.maybe_nonempty()) {
          event.cancel_wait();
          return true;
        }
        return event.commit_wait(ticket, kPatience);
      },
      [&] { event.notify_all(); });
}

}  // namespace
}  // namespace eagercomm
