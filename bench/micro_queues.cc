// Google Benchmark: the submission/completion queues and the idle engine's doorbell.
//
//   BM_MpscPushPop / BM_BoundedPushPop   one thread, push then pop a batch (no contention)
//   BM_MpscHandoff / BM_BoundedHandoff   a producer thread feeds the benchmark thread
//   BM_EventCountPingPong                two threads that block on each other in turn
// items_per_second is the figure to read; on a shared VM expect noise of tens of percent.
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>

#include "runtime/bounded_queue.h"
#include "runtime/cpu_relax.h"
#include "runtime/event_count.h"
#include "runtime/mpsc_queue.h"

namespace eagercomm {
namespace {

constexpr int kBatch = 256;

// Spin briefly, then give the core away: on an oversubscribed machine a pure spin waits for a
// whole time slice of the thread it waits for.
void backoff(int& spins) {
  if (++spins < 64) {
    cpu_relax();
  } else {
    spins = 0;
    std::this_thread::yield();
  }
}

struct Node : MpscNode {
  uint64_t payload = 0;
};

void BM_MpscPushPop(benchmark::State& state) {
  MpscQueue<Node> q;
  std::vector<Node> nodes(kBatch);
  for (auto _ : state) {
    for (Node& n : nodes) q.push(&n);
    for (int i = 0; i < kBatch; ++i) benchmark::DoNotOptimize(q.pop());
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_MpscPushPop);

void BM_BoundedPushPop(benchmark::State& state) {
  BoundedQueue<uint64_t> q(kBatch);
  for (auto _ : state) {
    for (uint64_t i = 0; i < kBatch; ++i) q.try_push(i);
    uint64_t out = 0;
    for (int i = 0; i < kBatch; ++i) {
      q.try_pop(out);
      benchmark::DoNotOptimize(out);
    }
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_BoundedPushPop);

// The producer thread takes free nodes from a return queue and pushes them; the benchmark
// thread pops them and hands them back. Two MPSC queues in a ring, one consumer each.
void BM_MpscHandoff(benchmark::State& state) {
  constexpr int kNodes = 1024;
  MpscQueue<Node> work;
  MpscQueue<Node> free_nodes;
  std::vector<Node> nodes(kNodes);
  for (Node& n : nodes) free_nodes.push(&n);
  std::atomic<bool> stop{false};
  std::thread producer([&] {
    uint64_t seq = 0;
    int spins = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      Node* n = free_nodes.pop();
      if (n == nullptr) {
        backoff(spins);
        continue;
      }
      n->payload = seq++;
      work.push(n);
    }
  });
  int spins = 0;
  for (auto _ : state) {
    Node* n;
    while ((n = work.pop()) == nullptr) backoff(spins);
    benchmark::DoNotOptimize(n->payload);
    free_nodes.push(n);
  }
  stop.store(true);
  producer.join();
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_MpscHandoff)->UseRealTime();

void BM_BoundedHandoff(benchmark::State& state) {
  BoundedQueue<uint64_t> q(1024);
  std::atomic<bool> stop{false};
  std::thread producer([&] {
    uint64_t seq = 0;
    int spins = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      if (q.try_push(seq)) {
        ++seq;
      } else {
        backoff(spins);
      }
    }
  });
  uint64_t out = 0;
  int spins = 0;
  for (auto _ : state) {
    while (!q.try_pop(out)) backoff(spins);
    benchmark::DoNotOptimize(out);
  }
  stop.store(true);
  producer.join();
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_BoundedHandoff)->UseRealTime();

// One iteration is a round trip: ping to the other thread, which wakes, pongs back. Each side
// blocks in the EventCount (no spinning), so this is the cost of two futex wake-ups.
void BM_EventCountPingPong(benchmark::State& state) {
  std::atomic<uint64_t> ball{0};  // Even: the benchmark thread's turn; odd: the partner's.
  std::atomic<bool> stop{false};
  EventCount doorbell[2];
  auto await_turn = [&](int side) {
    for (;;) {
      if (stop.load(std::memory_order_acquire) ||
          ball.load(std::memory_order_acquire) % 2 == static_cast<uint64_t>(side)) {
        return;
      }
      const EventCount::Ticket t = doorbell[side].prepare_wait();
      if (stop.load(std::memory_order_acquire) ||
          ball.load(std::memory_order_acquire) % 2 == static_cast<uint64_t>(side)) {
        doorbell[side].cancel_wait();
        return;
      }
      doorbell[side].commit_wait(t, std::chrono::nanoseconds(-1));
    }
  };
  std::thread partner([&] {
    for (;;) {
      await_turn(1);
      if (stop.load(std::memory_order_acquire)) return;
      ball.fetch_add(1, std::memory_order_acq_rel);
      doorbell[0].notify_all();
    }
  });
  for (auto _ : state) {
    ball.fetch_add(1, std::memory_order_acq_rel);  // Ping.
    doorbell[1].notify_all();
    await_turn(0);  // Pong.
  }
  stop.store(true, std::memory_order_release);
  doorbell[1].notify_all();
  partner.join();
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EventCountPingPong)->UseRealTime();

}  // namespace
}  // namespace eagercomm
