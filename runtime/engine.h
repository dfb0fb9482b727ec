// The progress engine: who runs the communication state machines, and how idle ranks sleep.
//
// One engine per communicator. Exactly one thread at a time *drives* it (holds the driver
// token) and calls ProgressSource::progress(). The driver is either
//   - the caller that waits: wait() takes the token and drives inline, so a blocking
//     collective runs on the caller's thread with no thread hop; or
//   - the engine's own progress thread (when enabled), which drives while application threads
//     compute. That is what lets a rank take part in a partial-collective round between two of
//     its own calls. It gives the token back whenever it goes idle and sleeps without it, so an
//     application thread that starts waiting usually takes the token at once; one that finds
//     the thread busy asks for the token and the thread hands it over promptly.
// A driver with nothing to do spins for `spin` (EAGERCOMM_SPIN), then blocks in
// ProgressSource::block() (the transport's wait), so ranks that outnumber cores do not steal
// the core from the rank they wait for. Waiters that do not drive sleep on an event count that
// the driver rings after completing operations.
//
// Thread-safety: every public member may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "runtime/clock.h"
#include "runtime/event_count.h"
#include "runtime/status.h"

namespace eagercomm {

// What the engine drives (the communicator's core implements it).
class ProgressSource {
 public:
  virtual ~ProgressSource() = default;
  // Does the work that is ready, without blocking. Returns how many events it handled (0:
  // idle). Called by the current driver only.
  virtual int progress() = 0;
  // Blocks until progress() may have work, interrupt() is called, or the timeout passes.
  // Called by the current driver only (it may look at driver-owned state first).
  virtual void block(std::chrono::nanoseconds timeout) = 0;
  // Like block(), but callable by a thread that does not drive: it only waits for activity
  // from outside (peers' notifications, interrupt()). The progress thread sleeps here without
  // holding the driver token, so that an application thread that waits can drive at once.
  virtual void wait_for_work(std::chrono::nanoseconds timeout) = 0;
  // Makes the current or the next block() return promptly. Any thread.
  virtual void interrupt() = 0;
  // True while operations are in flight, so that messages are expected soon: an idle driver
  // then polls longer before it sleeps. Called by the current driver only.
  virtual bool expecting() { return false; }
};

struct EngineOptions {
  std::chrono::nanoseconds spin = std::chrono::microseconds(20);
  int rank = -1;  // for the progress thread's log lines
  // More ranks on this host than CPUs this process may run on: an idle driver yields the core
  // at once instead of polling first, since the rank it waits for may need this very core.
  // (Measured, 8-byte allreduce on 2 cores, eagercomm-run: 3 ranks 14.6 -> 4.9-5.1 us, 4 ranks
  // 21.5 -> 5.1-5.5 us; the yield-timing heuristic alone did not catch it on this kernel.)
  bool oversubscribed = false;
};

class Engine {
 public:
  using Clock = RuntimeClock;

  Engine(ProgressSource& source, const EngineOptions& options);
  ~Engine();  // stops the progress thread
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Starts / stops the dedicated progress thread. Idempotent.
  void start_thread();
  void stop_thread();
  bool has_thread() const { return thread_.joinable(); }

  // Tells the driver that new work was submitted (wakes it when it sleeps).
  void kick() { source_.interrupt(); }

  // Returns when done() is true (true) or at `deadline` (false). Drives inline when it can.
  // done() must become true through progress made by some driver.
  bool wait(const std::function<bool()>& done, Clock::time_point deadline);

  // One progress pass if no other thread is driving; returns the events handled.
  int try_progress();

  // For a caller that must do something as the driver before it waits (begin an operation
  // without the submission queue): takes the token if it is free and the engine is open
  // (true), then drives until done() or the deadline (drive_held(): true when done()), and
  // gives the token back (end_driving()). After drive_held() returned false, wait() sorts out
  // the rest (deadline passed, or the engine is closing).
  bool try_begin_driving();
  bool drive_held(const std::function<bool()>& done, Clock::time_point deadline);
  void end_driving();

  // Drivers call this after completing operations, to wake non-driving waiters.
  void notify_waiters() { state_.notify_all(); }

  // Takes the driver token (asking the progress thread to hand it over), runs `fn`, and gives
  // the token back. For reading state the driver owns (statistics) from another thread.
  void run_exclusive(const std::function<void()>& fn);

  // Stops all driving (the progress thread exits, inline drivers return), takes the token,
  // runs `fn` as the last driver, and leaves the engine closed: later wait() calls only sleep
  // until done() holds (fn must make it hold, e.g. by failing every pending operation).
  void close(const std::function<void()>& fn);
  bool closed() const { return closed_.load(std::memory_order_acquire); }

  struct Stats {
    uint64_t blocks = 0;  // times a driver went to sleep in block()
  };
  Stats stats() const { return Stats{blocks_.load(std::memory_order_relaxed)}; }

 private:
  bool try_acquire();
  void acquire_blocking();  // waits for the token, waking the current driver to hand it over
  void release();
  // Drives until stop() is true or the deadline passes; returns stop()'s last value. Without
  // `may_block`, also returns (false) once it has been idle for the spin time.
  bool drive(const std::function<bool()>& stop, Clock::time_point deadline, bool may_block);
  void end_idle_period(bool switched);
  void thread_main();

  ProgressSource& source_;
  const EngineOptions options_;
  std::atomic<bool> driver_{false};  // the token
  std::atomic<int> want_{0};         // application threads waiting to take the token
  std::atomic<bool> stop_thread_{false};
  std::atomic<bool> closing_{false};
  std::atomic<bool> closed_{false};
  std::atomic<uint64_t> blocks_{0};
  std::atomic<int> contended_{0};            // idle periods left that skip pause-polling
  EventCount state_;                         // rung on token release and on completions
  EventCount thread_nap_;                    // the progress thread's naps (rung only to stop it)
  std::atomic<int64_t> app_released_at_{0};  // steady-clock ns of the last inline driver's release
  std::thread thread_;
};

}  // namespace eagercomm
