// Deadlines from timeouts. Every timeout the runtime is given (EAGERCOMM_TIMEOUT, the per-call
// arguments of the C++, C and Python APIs, the store's waits) becomes a deadline through
// deadline_after(), so that a timeout too large for the clock saturates to "forever" instead of
// overflowing into the past (EAGERCOMM_TIMEOUT=9223372036854775807ns once made every call time
// out at once).
#pragma once

#include <chrono>

namespace eagercomm {

// now + timeout on the steady clock; time_point::max() ("forever") for a zero or negative
// timeout (the runtime's spelling of "no limit") and for one that would pass the clock's end.
inline std::chrono::steady_clock::time_point deadline_after(
    std::chrono::nanoseconds timeout,
    std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now()) {
  using TimePoint = std::chrono::steady_clock::time_point;
  if (timeout <= std::chrono::nanoseconds::zero()) return TimePoint::max();
  if (timeout >= TimePoint::max() - now) return TimePoint::max();
  return now + timeout;
}

}  // namespace eagercomm
