#include "collectives/engine/liveness_watchdog.h"

#include <algorithm>
#include <cstdio>

#include "collectives/algorithms/algorithms.h"
#include "collectives/collective_log.h"
#include "collectives/engine/control.h"
#include "runtime/clock.h"

namespace eagercomm::detail {
namespace {

// "2.3s": silences as people read them (format_duration keeps every digit).
std::string seconds_text(std::chrono::nanoseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1fs", std::chrono::duration<double>(d).count());
  return buf;
}

int64_t steady_ns(Engine::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

LivenessWatchdog::LivenessWatchdog(int rank, int size, const Config& config, const GonePeers& gone,
                                   OnHung on_hung)
    : rank_(rank),
      size_(size),
      config_(config),
      gone_(gone),
      on_hung_(std::move(on_hung)),
      watched_(data_partners(rank, size)),
      heard_(size, 0),
      heard_seen_(size, 0),
      heard_at_(size),
      peer_heard_ns_(std::make_unique<std::atomic<int64_t>[]>(size)),
      peer_begun_(std::make_unique<std::atomic<uint64_t>[]>(size)) {}

void LivenessWatchdog::start(Engine& engine, Mailbox& mailbox, bool ranks_share_process) {
  if (config_.heartbeat <= std::chrono::nanoseconds::zero() ||
      config_.timeout <= std::chrono::nanoseconds::zero() || ranks_share_process || size_ < 2) {
    return;  // threads of one process cannot stop one by one; 0 means "wait forever"
  }
  engine_ = &engine;
  mailbox_ = &mailbox;
  interval_ = std::min(config_.heartbeat, config_.timeout / 4);
  hang_after_ = std::max(config_.timeout, 3 * interval_);
  const auto now = RuntimeClock::now();
  last_duty_at_ = now;
  for (int peer = 0; peer < size_; ++peer) {
    heard_at_[peer] = now;
    peer_heard_ns_[peer].store(steady_ns(now), std::memory_order_relaxed);
  }
  thread_ = std::thread([this] { thread_main(); });
}

void LivenessWatchdog::stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();  // cannot happen today: the watchdog never destroys
  } else {
    thread_.join();
  }
}

void LivenessWatchdog::thread_main() {
  log_set_thread_rank(rank_);
  std::unique_lock lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, interval_);
    if (stop_) break;
    lock.unlock();
    duty_due_.store(true, std::memory_order_relaxed);
    engine_->try_progress();
    // Another thread drives: it does the duty on its next pass; wake it if it sleeps.
    if (duty_due_.load(std::memory_order_relaxed)) engine_->kick();
    lock.lock();
  }
}

void LivenessWatchdog::duty(uint64_t begun) {
  duty_due_.store(false, std::memory_order_relaxed);
  const auto now = RuntimeClock::now();
  // This process itself did not run for a while (stopped, starved, a suspended VM): the
  // peers' silence may be its own. Judge them from a fresh window.
  const bool was_frozen = now - last_duty_at_ > 3 * interval_;
  last_duty_at_ = now;
  const uint32_t beat = control_word(ControlKind::kHeartbeat, begun);
  for (int peer : watched_) {
    if (gone_.gone(peer)) continue;
    if (heard_[peer] != heard_seen_[peer]) {
      heard_seen_[peer] = heard_[peer];
      heard_at_[peer] = now;
      peer_heard_ns_[peer].store(steady_ns(now), std::memory_order_relaxed);
    } else if (was_frozen) {
      heard_at_[peer] = now;
    } else if (now - heard_at_[peer] >= hang_after_) {
      const auto silent =
          std::chrono::duration_cast<std::chrono::nanoseconds>(now - heard_at_[peer]);
      const Status why = make_status(
          StatusCode::kPeerFailed,
          "rank %d is not responding: nothing heard from it for %s (EAGERCOMM_TIMEOUT %s); it is "
          "stopped, hung or unreachable",
          peer, seconds_text(silent).c_str(), format_duration(config_.timeout).c_str());
      EC_ERROR(kColl, "%s", why.message().c_str());
      on_hung_(peer, why);
      const auto secs = std::min<int64_t>(
          std::chrono::duration_cast<std::chrono::seconds>(silent).count(), 0xffffff);
      (void)mailbox_->send_control(peer, control_word(ControlKind::kEvicted, secs));
      continue;
    }
    // A peer that does not take its notifications gets no more of them queued.
    if (mailbox_->has_deferred(peer)) continue;
    Status s = mailbox_->send_control(peer, beat);
    if (!s.ok()) {
      EC_DEBUG(kColl, "heartbeat to rank %d: %s", peer, s.to_string().c_str());
    }
  }
}

std::string LivenessWatchdog::silent_report() const {
  if (!on()) return "";
  const int64_t now = steady_ns(RuntimeClock::now());
  std::string silent;
  for (int peer : watched_) {
    const int64_t age = now - peer_heard_ns_[peer].load(std::memory_order_relaxed);
    if (age <= silent_after_ns()) continue;
    silent += (silent.empty() ? "rank " : ", rank ") + std::to_string(peer) +
              " (nothing heard for " + seconds_text(std::chrono::nanoseconds(age)) + ")";
  }
  return silent.empty() ? "" : "; silent ranks: " + silent;
}

std::string LivenessWatchdog::late_report(uint64_t seq) const {
  const int64_t now = steady_ns(RuntimeClock::now());
  std::string late;
  for (int peer : watched_) {
    const int64_t age = now - peer_heard_ns_[peer].load(std::memory_order_relaxed);
    if (age > silent_after_ns()) continue;
    const uint64_t begun = peer_begun_[peer].load(std::memory_order_relaxed);
    if (begun > seq) continue;
    late += (late.empty() ? "rank " : ", rank ") + std::to_string(peer) +
            (begun == 0 ? " (alive, no collective started yet)"
                        : " (alive, last started " + seq_text(begun - 1) + ")");
  }
  return late;
}

}  // namespace eagercomm::detail
