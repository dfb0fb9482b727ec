// Waking a receiver that sleeps while its peers push into its rings (ring_block.h).
//
// The rule, one Dekker pair: the receiver announces itself with a read-modify-write on a word
// of its block, then looks at its rings (Consumer::maybe_nonempty()) and sleeps only when all
// are empty; a producer pushes (a release store), then reads that word with a read-modify-write
// and wakes the receiver when it is set. Both sides' read-modify-writes on the word are
// ordered, so either the receiver's look sees the push or the producer sees the announcement
// (a fence and a plain load would do on x86, but not in the C++ model TSan checks).
//
// Two words implement it:
//  - shm: the EventCount in the control block (runtime/event_count.h): prepare_wait() is the
//    announcement, notify_all() the producer's read-modify-write and, when someone waits, the
//    futex wake. The receiver sleeps on that futex.
//  - ucx: Sleepers below. The receiver sleeps on file descriptors (its eventfds and the UCP
//    worker's event fd) that a store cannot fire, so the producer that finds sleepers sends a
//    message whose arrival does (ucx's kWake).
#pragma once

#include <atomic>
#include <cstdint>

namespace eagercomm::notify_ring {

static_assert(std::atomic<uint32_t>::is_always_lock_free);

// The receiver's threads between announce() and withdraw(); in the block's header, on its own
// cache line. Zero-filled memory is an empty one.
struct Sleepers {
  alignas(64) std::atomic<uint32_t> count;

  // Receiver, before its last look at the rings.
  void announce() { count.fetch_add(1, std::memory_order_seq_cst); }
  // Receiver, once awake (or once it decided not to sleep).
  void withdraw() { count.fetch_sub(1, std::memory_order_relaxed); }
  // Producer, after its push: whether a receiver may sleep through it (wake it then).
  bool any() { return count.fetch_add(0, std::memory_order_seq_cst) != 0; }
};
static_assert(sizeof(Sleepers) == 64);

}  // namespace eagercomm::notify_ring
