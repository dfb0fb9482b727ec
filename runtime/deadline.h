// Deadlines from timeouts, and timeouts from deadlines: the one place that does this
// arithmetic. Every timeout the runtime is given (EAGERCOMM_TIMEOUT, the per-call arguments of
// the C++, C and Python APIs, the store's waits, the launcher's options) becomes a deadline
// here, so that a timeout too large for the clock saturates to "forever" instead of
// overflowing into the past (EAGERCOMM_TIMEOUT=9223372036854775807ns once made every call time
// out at once); and a deadline becomes a poll() or futex timeout here, so that "forever"
// never turns into a huge or negative wait.
#pragma once

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include "runtime/clock.h"

namespace eagercomm {

// "No deadline": the steady clock's last time point.
inline constexpr std::chrono::steady_clock::time_point kForever =
    std::chrono::steady_clock::time_point::max();

inline bool is_forever(std::chrono::steady_clock::time_point deadline) {
  return deadline == kForever;
}

// now + timeout on the steady clock, saturating at kForever; a negative timeout is forever and
// a zero one is `now` (a poll). For waits whose zero means "do not wait".
inline std::chrono::steady_clock::time_point deadline_in(
    std::chrono::nanoseconds timeout,
    std::chrono::steady_clock::time_point now = RuntimeClock::now()) {
  if (timeout < std::chrono::nanoseconds::zero()) return kForever;
  if (timeout >= kForever - now) return kForever;
  return now + timeout;
}

// now + timeout on the steady clock; kForever for a zero or negative timeout (the runtime's
// spelling of "no limit") and for one that would pass the clock's end.
inline std::chrono::steady_clock::time_point deadline_after(
    std::chrono::nanoseconds timeout,
    std::chrono::steady_clock::time_point now = RuntimeClock::now()) {
  if (timeout <= std::chrono::nanoseconds::zero()) return kForever;
  return deadline_in(timeout, now);
}

// Time left until `deadline`: zero once it passed, nanoseconds::max() for kForever.
inline std::chrono::nanoseconds time_left(
    std::chrono::steady_clock::time_point deadline,
    std::chrono::steady_clock::time_point now = RuntimeClock::now()) {
  if (is_forever(deadline)) return std::chrono::nanoseconds::max();
  if (deadline <= now) return std::chrono::nanoseconds::zero();
  return deadline - now;
}

// poll()'s timeout until `deadline`: -1 for kForever, 0 once it passed, else the milliseconds
// left rounded up (never waking before the deadline) and capped at INT_MAX.
inline int poll_timeout_ms(std::chrono::steady_clock::time_point deadline,
                           std::chrono::steady_clock::time_point now = RuntimeClock::now()) {
  if (is_forever(deadline)) return -1;
  if (deadline <= now) return 0;
  const int64_t ms = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
  return static_cast<int>(std::min<int64_t>(ms, INT_MAX));
}

}  // namespace eagercomm
