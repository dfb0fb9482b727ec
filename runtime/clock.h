// The runtime's clock: the steady clock, or a virtual clock while one is installed.
//
// Every time the engine and the collectives read (deadlines, timeouts, signature probes, the
// partial rounds' compute times and room polls) comes from RuntimeClock::now(). The simulation
// (transport/sim/, issue 21) runs every rank of a job in one process on one event loop and
// installs its virtual clock, so that a simulated run depends on virtual time alone: the same
// seed gives the same run. Nothing else installs one; then now() is the steady clock's, at the
// cost of one relaxed load.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace eagercomm {

class VirtualClock {
 public:
  virtual ~VirtualClock() = default;
  // The current virtual time as a steady-clock time point.
  virtual std::chrono::steady_clock::time_point now() const = 0;
};

namespace detail {
inline std::atomic<const VirtualClock*> g_virtual_clock{nullptr};
}  // namespace detail

struct RuntimeClock {
  using duration = std::chrono::steady_clock::duration;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::steady_clock::time_point;
  static constexpr bool is_steady = true;

  static time_point now() noexcept {
    const VirtualClock* v = detail::g_virtual_clock.load(std::memory_order_acquire);
    if (v == nullptr) [[likely]] {
      return std::chrono::steady_clock::now();
    }
    return v->now();
  }
};

// Installs `clock` as the process's clock while alive (one at a time; the previous one comes
// back at destruction). The clock must outlive this object.
class ScopedVirtualClock {
 public:
  explicit ScopedVirtualClock(const VirtualClock& clock)
      : previous_(detail::g_virtual_clock.exchange(&clock, std::memory_order_acq_rel)) {}
  ~ScopedVirtualClock() { detail::g_virtual_clock.store(previous_, std::memory_order_release); }
  ScopedVirtualClock(const ScopedVirtualClock&) = delete;
  ScopedVirtualClock& operator=(const ScopedVirtualClock&) = delete;

 private:
  const VirtualClock* previous_;
};

}  // namespace eagercomm
