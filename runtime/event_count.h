// EventCount: lets a thread block until "something happened" without lost wake-ups, and lets
// the threads that make things happen skip the system call when nobody sleeps. The idle
// progress engine blocks on one; producers ring it after publishing work.
//
// Usage (the re-check after prepare_wait() is what makes it race-free):
//
//   consumer:
//     if (work_available()) { ... }
//     else {
//       EventCount::Ticket t = ec.prepare_wait();
//       if (work_available()) ec.cancel_wait();
//       else ec.commit_wait(t, timeout);   // then loop and look again
//     }
//   producer:
//     publish work (a release store, a queue push, ...);
//     ec.notify_all();
//
// Promises:
//  - No lost wake-up: if a producer's notify_all() follows its publish, a consumer following
//    the pattern above either sees the work in its re-check or is woken (or never sleeps).
//  - commit_wait() may return true although the condition is false again (another consumer
//    took the work, or an unrelated notify): always loop and re-check.
//  - notify_all() makes no system call while no thread is between prepare_wait() and the end
//    of its cancel_wait() / commit_wait(); it always does one atomic read-modify-write.
//  - All members are safe to call from any number of threads concurrently. Every
//    prepare_wait() must be followed by exactly one cancel_wait() or commit_wait() by the
//    same thread, with no nested prepare_wait() in between.
//  - Works across processes: the object is two 32-bit atomics (standard layout, no pointers,
//    no process-local state) and the futex calls are not FUTEX_PRIVATE, so it may live in a
//    MAP_SHARED mapping. Such an object must be constructed (or zero-filled, which is the same
//    state) exactly once, before any process uses it, and never destroyed while in use.
//  - A ticket is a 32-bit sequence: a waiter that stays between prepare_wait() and
//    commit_wait() while exactly a multiple of 2^32 wake-ups happen would sleep until the next
//    notify or its timeout. That needs billions of system calls; it is accepted.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace eagercomm {

class EventCount {
 public:
  using Ticket = uint32_t;

  constexpr EventCount() = default;
  EventCount(const EventCount&) = delete;
  EventCount& operator=(const EventCount&) = delete;

  // Announces that the caller is about to wait and returns the ticket to wait on. The caller
  // must then re-check its condition and call cancel_wait() or commit_wait(ticket, ...).
  Ticket prepare_wait();

  // Withdraws the announcement: the condition became true, the caller will not wait.
  void cancel_wait();

  // Blocks until notify_all() has been called after the prepare_wait() that returned `ticket`
  // (true; immediately if that already happened) or until `timeout` has passed (false).
  // A negative timeout, or nanoseconds::max(), waits forever; zero only polls. Signals that
  // interrupt the wait are absorbed (the wait resumes with the remaining time).
  bool commit_wait(Ticket ticket, std::chrono::nanoseconds timeout);

  // Wakes every thread in commit_wait() (and makes every outstanding ticket stale, so threads
  // still between prepare_wait() and commit_wait() will not block). No system call when
  // nobody waits.
  void notify_all();

  // Threads between prepare_wait() and the end of cancel_wait()/commit_wait(). A snapshot,
  // for tests and statistics.
  uint32_t waiters() const;

 private:
  // The futex word: bumped by each notify_all() that finds a waiter.
  std::atomic<uint32_t> seq_{0};
  // Announced waiters; only ever changed by read-modify-writes (the ordering argument in
  // event_count.cc depends on it).
  std::atomic<uint32_t> waiters_{0};
};

}  // namespace eagercomm
