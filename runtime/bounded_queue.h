// BoundedQueue<T>: bounded multi-producer multi-consumer FIFO ring (Dmitry Vyukov's
// sequence-number ring). The progress engine publishes completions through it.
//
// Promises:
//  - try_push / try_pop never block and never allocate; any number of threads may call them
//    concurrently. Each is one CAS on its position counter in the uncontended case.
//  - Every pushed value is popped exactly once; a consumer sees the values of one producer in
//    the order they were pushed.
//  - try_push returns false when the ring is full and then leaves its argument untouched, so a
//    caller can retry with the same (possibly move-only) object.
//  - Not lock-free in the strict sense: a thread pre-empted between claiming a slot and
//    filling (or emptying) it makes that one slot look full (or empty) to the others until it
//    resumes. try_push/try_pop then report full/empty; callers retry.
//  - Values still queued when the queue is destroyed are destroyed with it. Destruction must
//    not race with any other call.
//
// T must be nothrow move-constructible and nothrow move-assignable: a throw between claiming
// and releasing a slot would wedge the ring (and the runtime builds without exceptions anyway).
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace eagercomm {

template <class T>
class BoundedQueue {
  static_assert(std::is_nothrow_move_constructible_v<T>,
                "BoundedQueue<T>: T must be nothrow move-constructible");
  static_assert(std::is_nothrow_move_assignable_v<T>,
                "BoundedQueue<T>: T must be nothrow move-assignable");

 public:
  // Largest capacity accepted; larger requests are clamped to it (and then fail to allocate).
  static constexpr size_t kMaxCapacity = size_t{1} << (std::numeric_limits<size_t>::digits - 2);

  // `capacity` is rounded up to a power of two, and to at least 2: the sequence numbers of a
  // one-slot ring could not tell "full" from "empty".
  explicit BoundedQueue(size_t capacity)
      : mask_(round_capacity(capacity) - 1), cells_(std::make_unique<Cell[]>(mask_ + 1)) {
    for (size_t i = 0; i <= mask_; ++i) cells_[i].seq.store(i, std::memory_order_relaxed);
  }

  ~BoundedQueue() {
    const size_t end = enqueue_pos_.load(std::memory_order_relaxed);
    for (size_t pos = dequeue_pos_.load(std::memory_order_relaxed); pos != end; ++pos) {
      std::destroy_at(cells_[pos & mask_].value());
    }
  }

  BoundedQueue(const BoundedQueue&) = delete;
  BoundedQueue& operator=(const BoundedQueue&) = delete;
  BoundedQueue(BoundedQueue&&) = delete;
  BoundedQueue& operator=(BoundedQueue&&) = delete;

  // Moves `value` in and returns true, or returns false (value untouched) when full.
  bool try_push(T&& value) { return emplace(std::move(value)); }
  // Copies `value` in and returns true, or returns false when full.
  bool try_push(const T& value) requires std::is_copy_constructible_v<T> { return emplace(value); }

  // Moves the oldest value into `out` and returns true, or returns false (out untouched) when
  // empty.
  bool try_pop(T& out) {
    Cell* cell;
    size_t pos = dequeue_pos_.load(std::memory_order_relaxed);
    for (;;) {
      cell = &cells_[pos & mask_];
      const size_t seq = cell->seq.load(std::memory_order_acquire);
      const auto diff = static_cast<std::ptrdiff_t>(seq - (pos + 1));
      if (diff == 0) {
        if (dequeue_pos_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) break;
      } else if (diff < 0) {
        return false;  // The slot has not been filled for this lap: empty.
      } else {
        pos = dequeue_pos_.load(std::memory_order_relaxed);  // Another consumer took it.
      }
    }
    out = std::move(*cell->value());
    std::destroy_at(cell->value());
    // Hands the slot to the producer of the next lap.
    cell->seq.store(pos + mask_ + 1, std::memory_order_release);
    return true;
  }

  size_t capacity() const { return mask_ + 1; }

  // A snapshot that may be stale by the time it returns; always within [0, capacity()].
  size_t size_approx() const {
    const size_t deq = dequeue_pos_.load(std::memory_order_acquire);
    const size_t enq = enqueue_pos_.load(std::memory_order_acquire);
    if (enq <= deq) return 0;
    return enq - deq > capacity() ? capacity() : enq - deq;
  }

 private:
  static constexpr size_t kCacheLine = 64;

  // A slot: `seq` says whose turn it is. seq == pos: free for the producer of position pos;
  // seq == pos + 1: holds the value of position pos for its consumer.
  struct Cell {
    std::atomic<size_t> seq{0};
    alignas(T) std::byte storage[sizeof(T)];

    // The live value; only between a producer's construct and a consumer's destroy.
    T* value() { return std::launder(reinterpret_cast<T*>(storage)); }
    void* raw() { return storage; }
  };

  static size_t round_capacity(size_t capacity) {
    if (capacity < 2) return 2;
    if (capacity > kMaxCapacity) return kMaxCapacity;
    return std::bit_ceil(capacity);
  }

  template <class U>
  bool emplace(U&& value) {
    Cell* cell;
    size_t pos = enqueue_pos_.load(std::memory_order_relaxed);
    for (;;) {
      cell = &cells_[pos & mask_];
      const size_t seq = cell->seq.load(std::memory_order_acquire);
      const auto diff = static_cast<std::ptrdiff_t>(seq - pos);
      if (diff == 0) {
        if (enqueue_pos_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) break;
      } else if (diff < 0) {
        return false;  // The slot still holds last lap's value: full.
      } else {
        pos = enqueue_pos_.load(std::memory_order_relaxed);  // Another producer took it.
      }
    }
    std::construct_at(static_cast<T*>(cell->raw()), std::forward<U>(value));
    // Publishes the value to the consumer of this position.
    cell->seq.store(pos + 1, std::memory_order_release);
    return true;
  }

  const size_t mask_;
  const std::unique_ptr<Cell[]> cells_;
  // Producers and consumers each hammer their own counter: keep them on separate lines.
  alignas(kCacheLine) std::atomic<size_t> enqueue_pos_{0};
  alignas(kCacheLine) std::atomic<size_t> dequeue_pos_{0};
};

}  // namespace eagercomm
