// A single-producer single-consumer ring of 32-bit notification tags in shared memory, the
// notification channel of the `shm` transport: one ring per (sender, receiver) pair, living in
// the receiver's control segment.
//
// Layout (ring_bytes(capacity)): head and tail indices on their own cache lines, then
// `capacity` 32-bit entries. Indices are 64-bit counters that never wrap in practice; an entry
// lives at index & (capacity - 1).
//
// Ordering: the producer stores the entry, then the tail with release; the consumer loads the
// tail with acquire, then reads entries. Everything the producer wrote before push() (a memcpy
// into the receiver's memory, stores through a mapping) is therefore visible to the consumer
// once it sees the tag. The consumer publishes its head with release after reading, the
// producer loads it with acquire before overwriting, so an entry is never overwritten unread.
//
// Trust: each side keeps its own index in private memory and only *reads* the other side's
// index from shared memory, checking it against what is possible (a head never passes the
// tail nor moves back; a tail never runs more than `capacity` ahead of the head nor moves
// back). A peer that scribbles over the ring makes these checks fail (kCorrupt); it can never
// make this side read or write outside the ring, since every entry index is masked.
//
// Thread-safety: a producer object is used by one thread at a time (the sender's driver), a
// consumer object likewise (the receiver's driver), except maybe_nonempty(), which any thread
// may call at any time (the transport's wait()).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace eagercomm::shm_ring {

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint64_t>) == 8 && sizeof(std::atomic<uint32_t>) == 4);

inline constexpr uint32_t kMinCapacity = 16;
inline constexpr uint32_t kMaxCapacity = 1u << 20;

struct Indices {
  alignas(64) std::atomic<uint64_t> head;  // written by the consumer only
  alignas(64) std::atomic<uint64_t> tail;  // written by the producer only
};
static_assert(sizeof(Indices) == 128);

inline bool valid_capacity(uint64_t capacity) {
  return capacity >= kMinCapacity && capacity <= kMaxCapacity && (capacity & (capacity - 1)) == 0;
}

// Bytes of one ring of `capacity` entries, a multiple of 64.
inline size_t ring_bytes(uint32_t capacity) {
  return sizeof(Indices) + (static_cast<size_t>(capacity) * sizeof(uint32_t) + 63) / 64 * 64;
}

// Constructs an empty ring in zero-filled memory of ring_bytes(capacity) bytes, 64-aligned.
inline void init(void* at, uint32_t capacity) {
  std::construct_at(static_cast<Indices*>(at));
  auto* entries =
      reinterpret_cast<std::atomic<uint32_t>*>(static_cast<uint8_t*>(at) + sizeof(Indices));
  for (uint32_t i = 0; i < capacity; ++i) std::construct_at(&entries[i], 0u);
}

enum class Room : uint8_t { kOk, kFull, kCorrupt };

class Producer {
 public:
  Producer() = default;
  Producer(void* at, uint32_t capacity)
      : idx_(static_cast<Indices*>(at)),
        entries_(
            reinterpret_cast<std::atomic<uint32_t>*>(static_cast<uint8_t*>(at) + sizeof(Indices))),
        capacity_(capacity) {}

  bool attached() const { return idx_ != nullptr; }

  // Whether one more tag fits. Reads the consumer's head only when the cached one says full.
  Room room() {
    if (tail_ - cached_head_ < capacity_) return Room::kOk;
    const uint64_t head = idx_->head.load(std::memory_order_acquire);
    if (head < cached_head_ || head > tail_) return Room::kCorrupt;
    cached_head_ = head;
    return tail_ - head < capacity_ ? Room::kOk : Room::kFull;
  }

  // Publishes `tag`; room() must have said kOk since the last push.
  void push(uint32_t tag) {
    entries_[tail_ & (capacity_ - 1)].store(tag, std::memory_order_relaxed);
    ++tail_;
    idx_->tail.store(tail_, std::memory_order_release);
  }

 private:
  Indices* idx_ = nullptr;
  std::atomic<uint32_t>* entries_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t tail_ = 0;         // authoritative: only this side writes the tail
  uint64_t cached_head_ = 0;  // last head read from the consumer
};

class Consumer {
 public:
  Consumer() = default;
  Consumer(void* at, uint32_t capacity)
      : idx_(static_cast<Indices*>(at)),
        entries_(
            reinterpret_cast<std::atomic<uint32_t>*>(static_cast<uint8_t*>(at) + sizeof(Indices))),
        capacity_(capacity) {}

  // Tags ready to pop, or -1 when the producer's tail is impossible (corrupt ring).
  int64_t available() {
    if (head_ == cached_tail_) {
      const uint64_t tail = idx_->tail.load(std::memory_order_acquire);
      if (tail < cached_tail_ || tail - head_ > capacity_) return -1;
      cached_tail_ = tail;
    }
    return static_cast<int64_t>(cached_tail_ - head_);
  }

  // The next tag; available() must have been positive.
  uint32_t pop() {
    const uint32_t tag = entries_[head_ & (capacity_ - 1)].load(std::memory_order_relaxed);
    ++head_;
    return tag;
  }

  // Hands the popped entries back to the producer.
  void publish() { idx_->head.store(head_, std::memory_order_release); }

  // Whether the producer has pushed something not yet popped and published. Any thread; a
  // hint only (the answer may be stale, and a corrupt ring may say yes forever).
  bool maybe_nonempty() const {
    return idx_->tail.load(std::memory_order_acquire) != idx_->head.load(std::memory_order_acquire);
  }

 private:
  Indices* idx_ = nullptr;
  std::atomic<uint32_t>* entries_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t head_ = 0;         // authoritative: only this side writes the head
  uint64_t cached_tail_ = 0;  // last tail read from the producer
};

}  // namespace eagercomm::shm_ring
