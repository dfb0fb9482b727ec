// A single-producer single-consumer ring of 32-bit notification tags in shared memory: the
// notification channel of the `shm` transport and of `ucx` between ranks that map each other's
// memory. One ring per (sender, receiver) pair, in a block of the receiver's memory
// (ring_block.h); a receiver about to sleep is woken as sleepers.h says.
//
// Layout (ring_bytes(capacity)): the consumer's head index on its own cache line, then
// `capacity` 64-bit entries. An entry holds a tag and the sequence number of its position
// (position + 1, mod 2^32; 0 is "never written"), so the consumer polls the entry it expects
// next and needs no producer index: a notification costs the consumer one cache line, the one
// that holds the entry (a separate tail index would be a second line, missed on every push).
// Indices are 64-bit counters private to each side; an entry lives at index & (capacity - 1).
//
// Ordering: the producer stores the entry with release; the consumer loads it with acquire and
// takes it when its sequence is the expected one. Everything the producer wrote before push()
// (a memcpy into the receiver's memory, stores through a mapping) is therefore visible to the
// consumer once it sees the tag. The consumer publishes its head with release after reading,
// the producer loads it with acquire before overwriting, so an entry is never overwritten
// unread.
//
// Trust: each side keeps its own index in private memory and only *reads* what the other side
// wrote, checking it against what is possible: a head never passes what was pushed nor moves
// back; an entry's sequence is the expected one (ready), one lap behind (not written yet), or 0
// before the first lap. A peer that scribbles over the ring makes these checks fail (kCorrupt
// / -1); it can never make this side read or write outside the ring, since every entry index
// is masked.
//
// Thread-safety: a producer object is used by one thread at a time (the sender's driver), a
// consumer object likewise (the receiver's driver), except maybe_nonempty(), which any thread
// may call at any time (the transport's wait()).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace eagercomm::notify_ring {

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint64_t>) == 8);

inline constexpr uint32_t kMinCapacity = 16;
inline constexpr uint32_t kMaxCapacity = 1u << 20;

struct Indices {
  alignas(64) std::atomic<uint64_t> head;  // written by the consumer only
};
static_assert(sizeof(Indices) == 64);

inline bool valid_capacity(uint64_t capacity) {
  return capacity >= kMinCapacity && capacity <= kMaxCapacity && (capacity & (capacity - 1)) == 0;
}

// Bytes of one ring of `capacity` entries, a multiple of 64.
inline size_t ring_bytes(uint32_t capacity) {
  return sizeof(Indices) + (static_cast<size_t>(capacity) * sizeof(uint64_t) + 63) / 64 * 64;
}

// The entry for position `index` carrying `tag`.
inline uint64_t make_entry(uint64_t index, uint32_t tag) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(index + 1)) << 32) | tag;
}
inline uint32_t entry_seq(uint64_t entry) { return static_cast<uint32_t>(entry >> 32); }

// Constructs an empty ring in zero-filled memory of ring_bytes(capacity) bytes, 64-aligned.
inline void init(void* at, uint32_t capacity) {
  std::construct_at(static_cast<Indices*>(at));
  auto* entries =
      reinterpret_cast<std::atomic<uint64_t>*>(static_cast<uint8_t*>(at) + sizeof(Indices));
  for (uint32_t i = 0; i < capacity; ++i) std::construct_at(&entries[i], uint64_t{0});
}

enum class Room : uint8_t { kOk, kFull, kCorrupt };

class Producer {
 public:
  Producer() = default;
  Producer(void* at, uint32_t capacity)
      : idx_(static_cast<Indices*>(at)),
        entries_(
            reinterpret_cast<std::atomic<uint64_t>*>(static_cast<uint8_t*>(at) + sizeof(Indices))),
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
    entries_[tail_ & (capacity_ - 1)].store(make_entry(tail_, tag), std::memory_order_release);
    ++tail_;
  }

 private:
  Indices* idx_ = nullptr;
  std::atomic<uint64_t>* entries_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t tail_ = 0;         // authoritative: only this side pushes
  uint64_t cached_head_ = 0;  // last head read from the consumer
};

class Consumer {
 public:
  Consumer() = default;
  Consumer(void* at, uint32_t capacity)
      : idx_(static_cast<Indices*>(at)),
        entries_(
            reinterpret_cast<std::atomic<uint64_t>*>(static_cast<uint8_t*>(at) + sizeof(Indices))),
        capacity_(capacity) {}

  // 1 and the next tag in `tag` when one is ready, 0 when none is, -1 when the entry is
  // impossible (a corrupt ring).
  int try_pop(uint32_t& tag) {
    const uint64_t e = entries_[head_ & (capacity_ - 1)].load(std::memory_order_acquire);
    const uint32_t seq = entry_seq(e);
    if (seq == static_cast<uint32_t>(head_ + 1)) {
      tag = static_cast<uint32_t>(e);
      ++head_;
      return 1;
    }
    const bool not_yet =
        head_ < capacity_ ? seq == 0 : seq == static_cast<uint32_t>(head_ + 1 - capacity_);
    return not_yet ? 0 : -1;
  }

  // Hands the popped entries back to the producer.
  void publish() { idx_->head.store(head_, std::memory_order_release); }

  // Whether the producer has pushed something not yet popped and published. Any thread; a
  // hint only (the answer may be stale, and a corrupt ring may say yes forever).
  bool maybe_nonempty() const {
    const uint64_t head = idx_->head.load(std::memory_order_acquire);
    const uint64_t e = entries_[head & (capacity_ - 1)].load(std::memory_order_acquire);
    return entry_seq(e) == static_cast<uint32_t>(head + 1);
  }

 private:
  Indices* idx_ = nullptr;
  std::atomic<uint64_t>* entries_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t head_ = 0;  // authoritative: only this side pops
};

}  // namespace eagercomm::notify_ring
