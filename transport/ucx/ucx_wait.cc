#include <errno.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "transport/transport_log.h"
#include "transport/ucx/ucx_transport_impl.h"

namespace eagercomm::ucx {
namespace {

// Sleeps until one of `fds` is ready or `limit` passed (nullopt: no limit); EINTR is a wake-up.
void sleep_on(struct pollfd* fds, nfds_t n, std::optional<std::chrono::nanoseconds> limit) {
  struct timespec ts {};
  if (limit) {
    const auto secs = std::chrono::duration_cast<std::chrono::seconds>(*limit);
    ts.tv_sec = static_cast<time_t>(secs.count());
    ts.tv_nsec = static_cast<long>((*limit - secs).count());
  }
  if (::ppoll(fds, n, limit ? &ts : nullptr, nullptr) < 0 && errno != EINTR) {
    EC_WARN(kNet, "ucx: ppoll in wait() failed: %m");
  }
}

}  // namespace

int UcxTransport::claim_wait_slot() {
  for (int i = 0; i < kWaitSlots; ++i) {
    bool expected = false;
    if (!slots_[i].busy.load(std::memory_order_relaxed) &&
        slots_[i].busy.compare_exchange_strong(expected, true, std::memory_order_seq_cst)) {
      return i;
    }
  }
  return -1;
}

void UcxTransport::signal_slot(int i) {
  const uint64_t one = 1;
  // EAGAIN only when the counter is saturated: the slot is signalled anyway.
  if (::write(slots_[i].fd.get(), &one, sizeof(one)) < 0 && errno != EAGAIN) {
    EC_WARN(kNet, "ucx: signalling a waiter failed: %m");
  }
}

// Sleeping without losing wake-ups, while another thread may be driving:
//
//  - wake() sets woken_ and then signals the eventfd of every claimed wait slot; wait() claims
//    a slot, drains its eventfd and then tests woken_. Both sides are seq_cst, so either wait()
//    sees woken_ or wake() sees the slot and signals it (a Dekker pair); nothing drains a
//    claimed slot but its owner, so concurrent waiters cannot steal each other's wake-ups
//    (one shared eventfd could: a second waiter re-checks readiness after the first drained).
//  - Network events: UCP's event fd only fires after ucp_worker_arm(), which returns BUSY when
//    events are pending. The worker runs in UCS_THREAD_MODE_MULTI, so arming from this thread
//    is serialized by UCX with the driver's ucp_worker_progress(). After arming we re-check
//    our completion queue: a driver's progress that finished before the arm has queued what
//    it found; one that starts after it runs on events that arrive after the arm, which
//    signal the fd (spurious wake-ups, allowed by the contract).
//  - Worker events are the driver's to take: its next poll progresses the worker. A thread
//    that comes back before anyone progressed it (events_reported_) is not the driver, or the
//    driver is not polling; arming again finds the same events (arm says busy, or says OK
//    while TCP's socket keeps the event fd readable) and returns at once: a waiter beside an
//    idle driver spun 170 000 times in 250 ms. It naps on its slot instead (wake() ends the
//    nap), 1 ms doubling up to 32 ms, until a poll progresses the worker.
//  - Arming drains transport signals (shared memory's socket) that another sleeping thread
//    may also be polling; a waiter whose arm says BUSY therefore signals the other waiters,
//    so that a sleeping driver still learns that there is work.
//  - woken_ is consumed only on entry (like inproc): a wake() while threads sleep makes them
//    return and also makes the next wait() return, which is a spurious return, never a lost
//    one.
void UcxTransport::wait(std::chrono::nanoseconds timeout) {
  if (woken_.exchange(false, std::memory_order_acq_rel)) return;
  if (timeout == std::chrono::nanoseconds::zero()) return;  // zero only polls: nothing to do
  const int slot = claim_wait_slot();
  if (slot >= 0) {
    uint64_t drained;
    while (::read(slots_[slot].fd.get(), &drained, sizeof(drained)) > 0) {
    }
  }
  auto done = [&] {
    if (slot >= 0) slots_[slot].busy.store(false, std::memory_order_seq_cst);
  };
  // Announced to ring producers before the last look at the rings (notify_ring/sleepers.h).
  notify_block_->sleepers.announce();
  auto done_inner = done;
  auto done2 = [&] {
    notify_block_->sleepers.withdraw();
    done_inner();
  };
  if (woken_.exchange(false, std::memory_order_seq_cst) || done_.any() || rings_maybe_nonempty()) {
    return done2();
  }
  if (events_reported_.load(std::memory_order_relaxed)) {
    // Worker events were reported and nobody progressed the worker since: this thread is not
    // the driver, or the driver is not polling. Arming again would find the same events and
    // return at once (a spin); nap on the slot instead, longer each time.
    const int64_t nap = busy_nap_ns_.load(std::memory_order_relaxed);
    busy_nap_ns_.store(std::min<int64_t>(2 * nap, std::chrono::nanoseconds(kBusyNapMax).count()),
                       std::memory_order_relaxed);
    const bool nap_forever = timeout < std::chrono::nanoseconds::zero();
    struct pollfd fd = {slot >= 0 ? slots_[slot].fd.get() : -1, POLLIN, 0};
    sleep_on(&fd, slot >= 0 ? 1 : 0,
             nap_forever ? std::chrono::nanoseconds(nap)
                         : std::min(timeout, std::chrono::nanoseconds(nap)));
    return done2();
  }
  busy_nap_ns_.store(std::chrono::nanoseconds(kBusyNapFirst).count(), std::memory_order_relaxed);
  bool armed = false;
  if (can_arm_) {
    const ucs_status_t s = ucp_worker_arm(core_->worker);
    if (s == UCS_ERR_BUSY) {
      progress_due_.store(true, std::memory_order_relaxed);
      events_reported_.store(true, std::memory_order_relaxed);
      for (int i = 0; i < kWaitSlots; ++i) {
        if (i != slot && slots_[i].busy.load(std::memory_order_seq_cst)) signal_slot(i);
      }
      return done2();
    }
    if (s == UCS_OK) {
      armed = true;
    } else {
      EC_WARN(kNet, "ucx: arming the worker failed: %s", ucs_status_string(s));
    }
    if (done_.any()) return done2();
  }
  // Without an armed worker or an own slot, nap briefly instead of sleeping for the timeout.
  const bool forever =
      timeout < std::chrono::nanoseconds::zero() || timeout == std::chrono::nanoseconds::max();
  std::chrono::nanoseconds limit = timeout;
  if (watching_.load(std::memory_order_relaxed)) {
    // Peers on this host are probed for a dead process from poll(): wake up for that.
    limit = forever ? std::chrono::nanoseconds(kLivenessInterval)
                    : std::min<std::chrono::nanoseconds>(timeout, kLivenessInterval);
    idle_polls_.store(kIdlePollsPerClockRead, std::memory_order_relaxed);
  }
  if (!armed || slot < 0) {
    limit = forever && !watching_ ? std::chrono::nanoseconds(kUnarmedNap)
                                  : std::min<std::chrono::nanoseconds>(limit, kUnarmedNap);
  }
  struct pollfd fds[2];
  nfds_t n = 0;
  if (armed) fds[n++] = {worker_efd_, POLLIN, 0};
  if (slot >= 0) fds[n++] = {slots_[slot].fd.get(), POLLIN, 0};
  const bool infinite = forever && armed && slot >= 0 && !watching_;
  sleep_on(fds, n, infinite ? std::nullopt : std::optional(limit));
  progress_due_.store(true, std::memory_order_relaxed);
  if (armed && (fds[0].revents & POLLIN) != 0) {
    events_reported_.store(true, std::memory_order_relaxed);
  }
  done2();
}

void UcxTransport::wake() {
  woken_.store(true, std::memory_order_seq_cst);
  for (int i = 0; i < kWaitSlots; ++i) {
    if (slots_[i].busy.load(std::memory_order_seq_cst)) signal_slot(i);
  }
}

}  // namespace eagercomm::ucx
