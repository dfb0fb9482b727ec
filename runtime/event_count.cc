// EventCount over the Linux futex.
//
// Why no wake-up can be lost. Name the steps:
//   waiter:   A  waiters_ += 1 (RMW)        producer:  P1 publish work
//             B  ticket = seq_ (acquire)               P2 n = waiters_ (RMW, reads latest)
//             C  re-check the condition                P3 if n > 0: seq_ += 1 (RMW, release)
//             D  futex_wait(seq_, ticket)              P4           futex_wake(seq_)
// waiters_ is only ever changed by read-modify-writes, so A and P2 are ordered in its
// modification order, and both are acq_rel (we use seq_cst):
//  - P2 before A: A reads a value in P2's release sequence, so P2 synchronises with A and P1
//    happens before C. The waiter sees the work and cancels.
//  - A before P2: P2 reads A's increment (the waiter's decrement comes only after D), so the
//    producer runs P3 and P4. If B read P3's value (or a later one), P3 synchronises with B
//    and again P1 happens before C: the waiter cancels. Otherwise the ticket predates P3: the
//    kernel's FUTEX_WAIT compares seq_ with the ticket atomically with queueing the waiter,
//    so either it sees P3's increment and returns at once, or it is queued before P3 and P4
//    wakes it.
// The usual formulation puts a seq_cst fence after A and before P2 and lets P2 be a plain
// load. We use the RMW instead: it gives the same guarantee from the C++ model alone (no
// reasoning about fences mixed with weaker accesses in user code), ThreadSanitizer
// understands it (it does not model fences), and on x86 it costs the same locked instruction.
#include "runtime/event_count.h"

#include "runtime/deadline.h"

#if !defined(__linux__)
#error "EventCount needs the Linux futex system call"
#endif

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <ctime>
#include <thread>
#include <type_traits>

namespace eagercomm {

// The futex is a 32-bit word; the atomic must be exactly that word, with no lock beside it,
// and the object must be placeable in memory shared between processes.
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
static_assert(alignof(std::atomic<uint32_t>) == alignof(uint32_t));
static_assert(std::is_standard_layout_v<EventCount>);
static_assert(std::is_trivially_destructible_v<EventCount>);
static_assert(sizeof(EventCount) == 2 * sizeof(uint32_t));

namespace {

uint32_t* futex_word(std::atomic<uint32_t>* word) { return reinterpret_cast<uint32_t*>(word); }

// Sleeps while *word == expected, at most `timeout` (nullptr: no limit). Returns 0 when woken
// (possibly spuriously) or the errno: EAGAIN (the word had changed), EINTR, ETIMEDOUT.
// Not FUTEX_PRIVATE_FLAG: the word may be shared with another process.
int futex_wait(std::atomic<uint32_t>* word, uint32_t expected, const timespec* timeout) {
  if (syscall(SYS_futex, futex_word(word), FUTEX_WAIT, expected, timeout, nullptr, 0) == 0) {
    return 0;
  }
  return errno;
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, futex_word(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace

EventCount::Ticket EventCount::prepare_wait() {
  waiters_.fetch_add(1, std::memory_order_seq_cst);  // A
  return seq_.load(std::memory_order_acquire);       // B
}

void EventCount::cancel_wait() { waiters_.fetch_sub(1, std::memory_order_seq_cst); }

bool EventCount::commit_wait(Ticket ticket, std::chrono::nanoseconds timeout) {
  using Clock = std::chrono::steady_clock;  // CLOCK_MONOTONIC, the clock of FUTEX_WAIT.
  // Negative, nanoseconds::max() or past the clock's end: forever; zero: do not sleep.
  const Clock::time_point deadline = deadline_in(timeout);
  const bool forever = is_forever(deadline);

  bool woken = false;
  for (;;) {
    if (seq_.load(std::memory_order_acquire) != ticket) {
      woken = true;
      break;
    }
    timespec relative{};
    if (!forever) {
      const std::chrono::nanoseconds left = time_left(deadline);
      if (left == std::chrono::nanoseconds::zero()) break;
      relative.tv_sec = static_cast<time_t>(left.count() / 1'000'000'000);
      relative.tv_nsec = static_cast<long>(left.count() % 1'000'000'000);
    }
    const int err = futex_wait(&seq_, ticket, forever ? nullptr : &relative);
    // 0: woken, maybe spuriously. EAGAIN: seq_ moved before we slept. EINTR: a signal.
    // ETIMEDOUT: the loop's deadline check decides. Anything else (EFAULT, ENOSYS, ...) means
    // the kernel refused to sleep: yield instead of burning the core, and keep the contract.
    if (err != 0 && err != EAGAIN && err != EINTR && err != ETIMEDOUT) std::this_thread::yield();
  }
  waiters_.fetch_sub(1, std::memory_order_seq_cst);
  return woken;
}

void EventCount::notify_all() {
  // P2: an RMW, not a load -- see the argument at the top of this file.
  if (waiters_.fetch_add(0, std::memory_order_seq_cst) == 0) return;
  seq_.fetch_add(1, std::memory_order_seq_cst);  // P3
  futex_wake_all(&seq_);                         // P4
}

uint32_t EventCount::waiters() const { return waiters_.load(std::memory_order_acquire); }

}  // namespace eagercomm
