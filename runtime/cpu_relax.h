// cpu_relax(): the body of every spin-wait loop.
//
// Tells the core that the thread is spinning, so that a sibling hyper-thread gets the
// execution resources and the loop's exit does not pay a memory-order mis-speculation flush.
// It is a hint with no memory-ordering effect of its own (beyond being a compiler barrier):
// the loop must still re-load its atomics. Safe from any thread; never blocks, never sleeps.
#pragma once

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace eagercomm {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(_M_X64)
  _mm_pause();  // SSE2, part of the x86-64 baseline: no runtime dispatch needed.
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#else
  // No portable pause instruction: at least stop the compiler from collapsing the loop.
  asm volatile("" ::: "memory");
#endif
}

}  // namespace eagercomm
