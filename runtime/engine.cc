#include "runtime/engine.h"

#include <sched.h>

#include <algorithm>

#include "runtime/cpu_relax.h"
#include "runtime/deadline.h"
#include "runtime/log.h"

namespace eagercomm {
namespace {

// Longest single sleep of a driver, so it re-checks deadlines and stop requests even if a
// wake-up were missed. Short enough to bound any such stall, long enough to cost nothing.
constexpr std::chrono::milliseconds kMaxBlock(100);

// Idle passes that poll back to back before the pause-polling window starts (about a
// microsecond of passes).
constexpr int kQuickPasses = 16;
// Pause-polling window of an idle driver before it starts yielding.
constexpr std::chrono::microseconds kPausePolling(4);
// A sched_yield() that took longer than this ran another thread in between.
constexpr std::chrono::microseconds kSwitchedAway(2);
// Idle periods that skip pause-polling after a yield ran another thread.
constexpr int kContendedPeriods = 64;

// How long an idle driver keeps polling (yielding) while operations are in flight: a sleeping
// rank's wake-up costs every collective step it takes part in.
// (Measured on this 2-core machine, solo partial allreduce with one rank delayed 20 ms: the
// fast ranks' median round went from 0.46-0.59 ms to 0.40-0.44 ms with 1 ms instead of 100 us.)
constexpr std::chrono::microseconds kExpectingSpin(1000);

// How long the progress thread leaves the engine to an application thread that just drove it:
// a loop that waits, posts and waits again takes the token back well within it.
constexpr std::chrono::microseconds kThreadGrace(200);

std::chrono::nanoseconds until(Engine::Clock::time_point deadline) {
  return std::min<std::chrono::nanoseconds>(time_left(deadline), kMaxBlock);
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

bool Engine::drive(const std::function<bool()>& stop, Clock::time_point deadline, bool may_block) {
  // The clock is read only while idle: a pass that made progress starts a new idle period
  // whose start is taken at its first idle pass (time_point{}: not started).
  Clock::time_point idle_since{};
  bool switched = false;  // a yield in this idle period let another thread run
  int quick = 0;          // idle passes so far that skipped the clock and the pause
  for (;;) {
    const int events = source_.progress();
    if (stop()) return true;
    if (closing_.load(std::memory_order_acquire)) return false;
    if (events > 0) {
      end_idle_period(switched);
      switched = false;
      idle_since = Clock::time_point{};
      quick = 0;
      continue;
    }
    // The first idle passes poll back to back: an answer from a peer on another core often
    // lands within a few hundred nanoseconds, and the clock read (~25 ns) and pause (up to
    // ~140 cycles) of every pass would add to a small collective's latency (issue #4).
    if (quick < kQuickPasses && !options_.oversubscribed &&
        contended_.load(std::memory_order_relaxed) == 0) {
      ++quick;
      continue;
    }
    const auto now = Clock::now();
    if (idle_since == Clock::time_point{}) idle_since = now;
    if (now >= deadline) return false;
    if (now - idle_since < options_.spin ||
        (now - idle_since < kExpectingSpin && source_.expecting())) {
      // Pause-polling first: a peer on another core usually answers within microseconds.
      // When yields have been handing the core to other threads (ranks outnumber cores), skip
      // it and yield at once: the rank we wait for may be runnable on this very core, and a
      // pause loop keeps it off until the time slice ends (measured, 8-byte allreduce on this
      // 2-core machine: 4 ranks 14.6 us yielding at once vs 39.6 us after 4 us of pausing;
      // 2 ranks 0.9 us pausing vs 1.4 us yielding).
      const bool contended =
          options_.oversubscribed || contended_.load(std::memory_order_relaxed) > 0;
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
    if (!may_block) return false;
    blocks_.fetch_add(1, std::memory_order_relaxed);
    source_.block(until(deadline));
    idle_since = Clock::time_point{};
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
      const bool ok = drive(done, deadline, /*may_block=*/true);
      end_driving();
      if (ok) return true;
      if (Clock::now() >= deadline) return done();
      continue;  // closing: fall through to sleeping until done()
    }
    if (Clock::now() >= deadline) {
      unannounce();
      return done();
    }
    // Someone else drives. Ask the progress thread to hand over the token, give it a moment
    // (it lets go between two progress passes), then sleep until the token is released or
    // operations complete.
    if (!announced && has_thread() && !closing_.load(std::memory_order_acquire)) {
      announced = true;
      want_.fetch_add(1, std::memory_order_acq_rel);
      source_.interrupt();
      const auto until_spin = Clock::now() + options_.spin;  // at most 1 s: no overflow
      while (!done() && driver_.load(std::memory_order_acquire) && Clock::now() < until_spin) {
        sched_yield();
      }
      continue;
    }
    const EventCount::Ticket t = state_.prepare_wait();
    if (done() || (!driver_.load(std::memory_order_acquire) && !closing_.load())) {
      state_.cancel_wait();
      continue;
    }
    state_.commit_wait(t, until(deadline));
  }
}

bool Engine::try_begin_driving() {
  if (closing_.load(std::memory_order_acquire) || !try_acquire()) return false;
  if (closing_.load(std::memory_order_acquire)) {
    release();
    return false;
  }
  return true;
}

bool Engine::drive_held(const std::function<bool()>& done, Clock::time_point deadline) {
  return drive(done, deadline, /*may_block=*/true);
}

void Engine::end_driving() {
  // Only the progress thread reads it; the clock costs ~25 ns, a tenth of a small op.
  if (has_thread()) {
    app_released_at_.store(Clock::now().time_since_epoch().count(), std::memory_order_release);
  }
  release();
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
  thread_nap_.notify_all();
  thread_.join();
}

void Engine::thread_main() {
  log_set_thread_rank(options_.rank);
  EC_DEBUG(kEngine, "progress thread started");
  auto should_yield = [this] {
    return stop_thread_.load(std::memory_order_acquire) ||
           want_.load(std::memory_order_acquire) > 0 || closing_.load(std::memory_order_acquire);
  };
  auto nap = [this](std::chrono::nanoseconds d) {
    const EventCount::Ticket t = thread_nap_.prepare_wait();
    if (stop_thread_.load(std::memory_order_acquire) || closing_.load()) {
      thread_nap_.cancel_wait();
      return;
    }
    thread_nap_.commit_wait(t, d);
  };
  while (!stop_thread_.load(std::memory_order_acquire) && !closing_.load()) {
    // An application thread drives (or is about to): stay out of its way. Checking back every
    // grace period costs a wake-up; being woken at each of its releases, and then holding the
    // token it wants back a moment later, cost far more (measured: a partial round's wait took
    // 350 us with hand-overs at every release, 190 us with no thread at all).
    if (should_yield() || driver_.load(std::memory_order_acquire)) {
      nap(kThreadGrace);
      continue;
    }
    const auto since = Clock::now().time_since_epoch() -
                       std::chrono::nanoseconds(app_released_at_.load(std::memory_order_acquire));
    if (since < kThreadGrace) {
      nap(kThreadGrace - since);
      continue;
    }
    if (!try_acquire()) continue;
    drive(should_yield, kForever, /*may_block=*/false);
    release();
    // Idle: sleep without the token until peers or submissions bring work.
    if (!should_yield()) {
      blocks_.fetch_add(1, std::memory_order_relaxed);
      source_.wait_for_work(kMaxBlock);
    }
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
  thread_nap_.notify_all();
  closing_.store(true, std::memory_order_release);
  // Inline drivers see closing_ and release the token promptly.
  acquire_blocking();
  fn();
  closed_.store(true, std::memory_order_release);
  release();
}

}  // namespace eagercomm
