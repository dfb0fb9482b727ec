// Asymmetric fences between processes: a Dekker-style handshake ("I published X, is anyone
// asleep?" against "I am going to sleep, is there an X?") needs a full fence on both sides. On
// x86 that fence (mfence or a locked instruction) waits for the store buffer to drain, which
// after stores into a peer's cache lines costs as much as the rest of a small notification.
// The side that is about to sleep is the slow path anyway, so it pays for both: membarrier(2)
// MEMBARRIER_CMD_GLOBAL_EXPEDITED makes every running thread of every registered process
// execute a full barrier, and the fast side gets away with a compiler barrier.
//
//   fast side (notifier):  publish X; light_fence(); if (sleepers) wake;
//   slow side (sleeper):   sleepers++; heavy_fence(); if (X) don't sleep;
//
// Both sides must agree: the fast side may use light_fence() only when the slow side will call
// heavy_fence() with the fast side registered. So each process registers once
// (asymmetric_fences_available()), tells its peers whether it did (in shared memory, before
// they connect), and a notifier uses the light fence towards a peer only when both did.
// Without kernel support (Linux < 4.16, seccomp filters) everything falls back to full fences.
#pragma once

#include <atomic>

namespace eagercomm {

// Registers this process for global expedited membarrier (once; thread-safe). True when
// heavy_fence() works and light fences towards this process are safe.
bool asymmetric_fences_available();

// The slow side's fence: membarrier(GLOBAL_EXPEDITED), or a full fence without support.
void heavy_fence();

// The fast side's fence, valid only when the peer pairs it with heavy_fence().
inline void light_fence() { std::atomic_signal_fence(std::memory_order_seq_cst); }

}  // namespace eagercomm
