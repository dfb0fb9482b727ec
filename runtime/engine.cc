#include "runtime/engine.h"

#include <sched.h>

#include <algorithm>

#include "runtime/cpu_relax.h"
#include "runtime/log.h"

namespace eagercomm {
namespace {

// Longest single sleep of a driver, so it re-checks deadlines and stop requests even if a
// wake-up were missed. Short enough to bound any such stall, long enough to cost nothing.
constexpr std::chrono::milliseconds kMaxBlock(100);

// Pause-polling window of an idle driver before it starts yielding.
constexpr std::chrono::microseconds kPausePolling(4);
// A sched_yield() that took longer than this ran another thread in between.
constexpr std::chrono::microseconds kSwitchedAway(2);
// Idle periods that skip pause-polling after a yield ran another thread.
constexpr int kContendedPeriods = 64;

std::chrono::nanoseconds until(Engine::Clock::time_point deadline) {
  if (deadline == Engine::Clock::time_point::max()) return kMaxBlock;
  const auto left = deadline - Engine::Clock::now();
  return std::clamp<std::chrono::nanoseconds>(left, std::chrono::nanoseconds(0), kMaxBlock);
}

}  // namespace

Engine::Engine(ProgressSource& source, const EngineOptions& options)
    : source_(source), options_(options) {}

Engine::~Engine() { stop_thread(); }

bool Engine::try_acquire() {
  if (driver_.load(std::memory_order_relaxed)) return false;
  return !driver_.exchange(true, std::memory_order_acquire);
}

void Engine::release() {
  driver_.store(false, std::memory_order_release);
  state_.notify_all();
}

bool Engine::drive(const std::function<bool()>& stop, Clock::time_point deadline) {
  auto idle_since = Clock::now();
  bool switched = false;  // a yield in this idle period let another thread run
  for (;;) {
    const int events = source_.progress();
    if (stop()) return true;
    if (closing_.load(std::memory_order_acquire)) return false;
    const auto now = Clock::now();
    if (events > 0) {
      end_idle_period(switched);
      switched = false;
      idle_since = now;
      continue;
    }
    if (now >= deadline) return false;
    if (now - idle_since < options_.spin) {
      // Pause-polling first: a peer on another core usually answers within microseconds.
      // When yields have been handing the core to other threads (ranks outnumber cores), skip
      // it and yield at once: the rank we wait for may be runnable on this very core, and a
      // pause loop keeps it off until the time slice ends (measured, 8-byte allreduce on this
      // 2-core machine: 4 ranks 14.6 us yielding at once vs 39.6 us after 4 us of pausing;
      // 2 ranks 0.9 us pausing vs 1.4 us yielding).
      const bool contended = contended_.load(std::memory_order_relaxed) > 0;
      if (!contended && now - idle_since < kPausePolling) {
        cpu_relax();
      } else {
        sched_yield();
        if (Clock::now() - now > kSwitchedAway) switched = true;
      }
      continue;
    }
    end_idle_period(switched);
    switched = false;
    blocks_.fetch_add(1, std::memory_order_relaxed);
    source_.block(until(deadline));
    idle_since = Clock::now();
  }
}

void Engine::end_idle_period(bool switched) {
  if (switched) {
    contended_.store(kContendedPeriods, std::memory_order_relaxed);
  } else if (contended_.load(std::memory_order_relaxed) > 0) {
    contended_.fetch_sub(1, std::memory_order_relaxed);
  }
}

bool Engine::wait(const std::function<bool()>& done, Clock::time_point deadline) {
  bool announced = false;
  auto unannounce = [&] {
    if (announced) {
      announced = false;
      want_.fetch_sub(1, std::memory_order_acq_rel);
      state_.notify_all();
    }
  };
  for (;;) {
    if (done()) {
      unannounce();
      return true;
    }
    if (!closing_.load(std::memory_order_acquire) && try_acquire()) {
      unannounce();
      const bool ok = drive(done, deadline);
      release();
      if (ok) return true;
      if (Clock::now() >= deadline) return done();
      continue;  // closing: fall through to sleeping until done()
    }
    if (Clock::now() >= deadline) {
      unannounce();
      return done();
    }
    // Someone else drives. Ask the progress thread to hand over the token, then sleep until
    // the token is released or operations complete.
    if (!announced && has_thread() && !closing_.load(std::memory_order_acquire)) {
      announced = true;
      want_.fetch_add(1, std::memory_order_acq_rel);
      source_.interrupt();
    }
    const EventCount::Ticket t = state_.prepare_wait();
    if (done() || (!driver_.load(std::memory_order_acquire) && !closing_.load())) {
      state_.cancel_wait();
      continue;
    }
    state_.commit_wait(t, until(deadline));
  }
}

int Engine::try_progress() {
  if (closing_.load(std::memory_order_acquire) || !try_acquire()) return 0;
  const int events = source_.progress();
  release();
  return events;
}

void Engine::start_thread() {
  if (thread_.joinable() || closing_.load()) return;
  stop_thread_.store(false);
  thread_ = std::thread([this] { thread_main(); });
}

void Engine::stop_thread() {
  if (!thread_.joinable()) return;
  stop_thread_.store(true, std::memory_order_release);
  source_.interrupt();
  state_.notify_all();
  thread_.join();
}

void Engine::thread_main() {
  log_set_thread_rank(options_.rank);
  EC_DEBUG(kEngine, "progress thread started");
  auto should_yield = [this] {
    return stop_thread_.load(std::memory_order_acquire) ||
           want_.load(std::memory_order_acquire) > 0 || closing_.load(std::memory_order_acquire);
  };
  while (!stop_thread_.load(std::memory_order_acquire) && !closing_.load()) {
    if (!should_yield() && try_acquire()) {
      drive(should_yield, Clock::time_point::max());
      release();
      continue;
    }
    // Park until the token is free and nobody else wants it.
    const EventCount::Ticket t = state_.prepare_wait();
    if (stop_thread_.load() || closing_.load() ||
        (want_.load() == 0 && !driver_.load(std::memory_order_acquire))) {
      state_.cancel_wait();
      continue;
    }
    state_.commit_wait(t, kMaxBlock);
  }
  EC_DEBUG(kEngine, "progress thread stopped");
}

void Engine::acquire_blocking() {
  while (!try_acquire()) {
    // A driver asleep in block() must wake up to see that someone wants the token.
    source_.interrupt();
    const EventCount::Ticket t = state_.prepare_wait();
    if (!driver_.load(std::memory_order_acquire)) {
      state_.cancel_wait();
      continue;
    }
    state_.commit_wait(t, std::chrono::milliseconds(1));
  }
}

void Engine::run_exclusive(const std::function<void()>& fn) {
  want_.fetch_add(1, std::memory_order_acq_rel);
  acquire_blocking();
  want_.fetch_sub(1, std::memory_order_acq_rel);
  fn();
  release();
}

void Engine::close(const std::function<void()>& fn) {
  stop_thread();
  closing_.store(true, std::memory_order_release);
  // Inline drivers see closing_ and release the token promptly.
  acquire_blocking();
  fn();
  closed_.store(true, std::memory_order_release);
  release();
}

}  // namespace eagercomm
