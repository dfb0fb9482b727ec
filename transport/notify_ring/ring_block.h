// A block of notification rings in the receiver's memory: a header of the backend's own
// (`header_bytes`, a multiple of 64: shm's control block, ucx's sleepers word), then one ring
// (notify_ring.h) per sender of the world, sender s's at ring_offset(header_bytes, s, capacity).
// The receiver lays it out (init_rings) and consumes every ring; sender s maps the block and
// produces into ring s only. shm's control segment and ucx's notification region are such
// blocks; both backends read their rings with drain().
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "transport/notify_ring/notify_ring.h"
#include "transport/transport.h"

namespace eagercomm::notify_ring {

inline size_t ring_offset(size_t header_bytes, int sender, uint32_t capacity) {
  return header_bytes + static_cast<size_t>(sender) * ring_bytes(capacity);
}

// Bytes of a block with rings for `world` senders.
inline size_t block_bytes(size_t header_bytes, int world, uint32_t capacity) {
  return ring_offset(header_bytes, world, capacity);
}

// Constructs `world` empty rings after the header, in zero-filled, 64-aligned memory of
// block_bytes() bytes.
inline void init_rings(uint8_t* block, size_t header_bytes, int world, uint32_t capacity) {
  for (int s = 0; s < world; ++s) init(block + ring_offset(header_bytes, s, capacity), capacity);
}

inline Producer producer_at(uint8_t* block, size_t header_bytes, int sender, uint32_t capacity) {
  return Producer(block + ring_offset(header_bytes, sender, capacity), capacity);
}

inline Consumer consumer_at(uint8_t* block, size_t header_bytes, int sender, uint32_t capacity) {
  return Consumer(block + ring_offset(header_bytes, sender, capacity), capacity);
}

// Ring entries per sender for a mailbox of `slots` slots per peer: room for every slot's data
// notification and credit plus control traffic, so a full ring only shows up under abuse.
inline uint32_t capacity_for(uint32_t slots) {
  const uint64_t need = std::max<uint64_t>(64, uint64_t{4} * slots + 64);
  uint64_t capacity = kMinCapacity;
  while (capacity < need && capacity < kMaxCapacity) capacity *= 2;
  return static_cast<uint32_t>(capacity);
}

// What drain() took from one sender's ring.
struct Drained {
  size_t count = 0;      // kNotify completions written to the front of `out`
  bool corrupt = false;  // the ring holds an impossible entry; then count < out.size()
};

// Pops `sender`'s ready tags into `out` as kNotify completions, in push order, while `out` has
// room, and hands the popped entries back to the producer (one release store per call, not
// per tag). A corrupt ring is only ever found by a pop that had room, so the caller can always
// report the sender in `out` right after what was taken.
inline Drained drain(Consumer& ring, int sender, std::span<TransportCompletion> out) {
  Drained d;
  uint32_t tag = 0;
  int got = 0;
  while (d.count < out.size() && (got = ring.try_pop(tag)) > 0) {
    // Field by field: see LocalCompletions::push().
    TransportCompletion& c = out[d.count++];
    c.kind = TransportCompletion::Kind::kNotify;
    c.peer = sender;
    c.tag = tag;
    c.cookie = 0;
  }
  if (d.count > 0) ring.publish();
  d.corrupt = got < 0;
  return d;
}

}  // namespace eagercomm::notify_ring
