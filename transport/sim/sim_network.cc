#include "transport/sim/sim_network.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

namespace eagercomm::sim {
namespace {

std::atomic<SimNetwork*> g_installed{nullptr};

int64_t ns(double v) { return static_cast<int64_t>(std::llround(v)); }

}  // namespace

SimNetwork::SimNetwork(int size, const LogGP& model, uint64_t elide_bytes)
    : size_(size),
      model_(model),
      elide_bytes_(elide_bytes),
      base_(std::chrono::steady_clock::now()),
      ranks_(size),
      setup_woken_(size, 0) {
  for (int r = 0; r < size; ++r) setup_cv_.push_back(std::make_unique<std::condition_variable>());
}

SimNetwork::~SimNetwork() { uninstall(); }

Status SimNetwork::install() {
  SimNetwork* expected = nullptr;
  // One simulated job at a time per process: the registry has one "sim" backend.
  if (!g_installed.compare_exchange_strong(expected, this)) {
    return Status(StatusCode::kUnavailable,
                  "sim: another simulated network is installed in this process (one at a time)");
  }
  return Status::Ok();
}

void SimNetwork::uninstall() {
  SimNetwork* expected = this;
  g_installed.compare_exchange_strong(expected, nullptr);
}

SimNetwork* installed_network() { return g_installed.load(); }

void SimNetwork::push(Event e) {
  e.seq = seq_++;
  if (e.kind == Kind::kDeliver || e.kind == Kind::kLocal) ++in_flight_;
  events_.push(e);
}

void SimNetwork::schedule_run(int rank, int64_t at_ns) {
  Event e{};
  e.at = std::max(at_ns, now_ns_);
  e.kind = Kind::kDriver;
  e.rank = rank;
  push(e);
}

void SimNetwork::took_in(int rank, size_t bytes) {
  busy(rank, ns(model_.reduce_ns_per_byte * static_cast<double>(bytes)));
  ranks_[rank].reduced_until = ranks_[rank].cpu_free;
}

int64_t SimNetwork::book_rx(Rank& d, int64_t reach, int64_t wire) {
  std::map<int64_t, int64_t>& busy = d.rx_busy;
  while (!busy.empty() && busy.begin()->second <= now_ns_) busy.erase(busy.begin());
  int64_t start = reach;
  auto next = busy.upper_bound(start);
  if (next != busy.begin() && std::prev(next)->second > start) start = std::prev(next)->second;
  while (next != busy.end() && next->first < start + wire) {
    start = std::max(start, next->second);
    ++next;
  }
  if (wire > 0) busy.emplace(start, start + wire);
  return start + wire;
}

void SimNetwork::busy(int rank, int64_t busy_ns) {
  Rank& r = ranks_[rank];
  r.cpu_free = std::max(r.cpu_free, now_ns_) + busy_ns;
}

uint32_t SimNetwork::add_region(int rank, uint8_t* data, size_t size) {
  std::lock_guard lock(setup_mu_);
  ranks_[rank].regions.push_back(Region{data, size});
  return static_cast<uint32_t>(ranks_[rank].regions.size() - 1);
}

Result<SimNetwork::Region> SimNetwork::region(int rank, uint32_t id) const {
  std::lock_guard lock(setup_mu_);
  if (rank < 0 || rank >= size_ || id >= ranks_[rank].regions.size() ||
      ranks_[rank].regions[id].data == nullptr) {
    return make_status(StatusCode::kInvalidArgument, "sim: no region %u of rank %d", id, rank);
  }
  return ranks_[rank].regions[id];
}

void SimNetwork::drop_region(int rank, uint32_t id) {
  std::lock_guard lock(setup_mu_);
  if (id < ranks_[rank].regions.size()) ranks_[rank].regions[id] = Region{};
}

bool SimNetwork::left(int rank) const {
  std::unique_lock<std::mutex> setup;
  if (!timed_) setup = std::unique_lock(setup_mu_);
  return rank >= 0 && rank < size() && ranks_[rank].closed && !ranks_[rank].dead;
}

Status SimNetwork::write(int src, int dst, const uint8_t* from, uint8_t* to, size_t bytes,
                         uint32_t tag, uint64_t cookie, bool signal_done) {
  std::unique_lock<std::mutex> setup;
  if (!timed_) setup = std::unique_lock(setup_mu_);
  if (ranks_[src].closed) {
    return Status(StatusCode::kAborted, "sim: this rank's transport is closed");
  }
  if (ranks_[dst].dead && now_ns_ >= ranks_[dst].lost_after) return peer_error(dst);
  if (ranks_[dst].closed && !ranks_[dst].dead) {
    return make_status(StatusCode::kPeerFailed, "sim: rank %d left the job", dst);
  }
  Rank& s = ranks_[src];
  Rank& d = ranks_[dst];
  if (!timed_) {
    if (d.dead) return peer_error(dst);
    // Setup: delivered at once, untimed.
    if (to && bytes) std::memcpy(to, from, bytes);
    d.completions.push_back(TransportCompletion{TransportCompletion::Kind::kNotify, src, tag, 0});
    if (signal_done) {
      s.completions.push_back(
          TransportCompletion{TransportCompletion::Kind::kWriteDone, dst, 0, cookie});
    }
    setup_cv_[dst]->notify_all();
    return Status::Ok();
  }
  const int64_t wire = ns(model_.wire_ns(bytes));
  const int64_t cpu = std::max(now_ns_, s.cpu_free) + ns(model_.o_ns);
  s.cpu_free = cpu;
  int64_t arrive;
  if (bytes == 0) {
    // A notification takes no time on the links: it does not queue behind another peer's bytes
    // at either end (the NIC interleaves queue pairs), only behind this pair's (below).
    arrive = cpu + ns(model_.L_ns);
  } else {
    const int64_t inject = std::max(cpu, s.tx_free);
    s.tx_free = inject + std::max(ns(model_.g_ns), wire);
    // The receiver's link takes the bytes of one message after another, in the order they reach
    // it, not the order their senders ran in (a rank's sends are all scheduled when it runs).
    arrive = book_rx(d, inject + ns(model_.L_ns), wire);
  }
  if (perturb_.jitter_ns > 0) {
    arrive += static_cast<int64_t>(rng_() % static_cast<uint64_t>(perturb_.jitter_ns + 1));
  }
  // Per-pair order (the contract): nothing overtakes what this rank sent that peer before.
  int64_t& last = s.last_arrival[dst];
  arrive = std::max(arrive, last);
  last = arrive;
  ++stats_.messages;
  if (trace_) {
    std::fprintf(trace_, "%lld send %d -> %d %zuB tag 0x%08x arrives %lld\n",
                 static_cast<long long>(now_ns_), src, dst, bytes, tag,
                 static_cast<long long>(arrive));
  }
  stats_.bytes += bytes;

  Event e{};
  e.at = arrive;
  e.kind = Kind::kDeliver;
  e.rank = dst;
  e.completion = TransportCompletion{TransportCompletion::Kind::kNotify, src, tag, 0};
  e.from = from;
  e.to = to;
  e.bytes = bytes;
  push(e);
  if (signal_done && !d.dead) {  // a dead peer acknowledges nothing
    Event done{};
    done.at = arrive + ns(model_.L_ns);  // the acknowledgement
    done.kind = Kind::kLocal;
    done.rank = src;
    done.completion = TransportCompletion{TransportCompletion::Kind::kWriteDone, dst, 0, cookie};
    push(done);
  }
  return Status::Ok();
}

void SimNetwork::perturb(const Perturbation& p) {
  perturb_ = p;
  rng_.seed(p.seed);
}

void SimNetwork::kill(int rank, int64_t detect_ns) {
  Rank& r = ranks_[rank];
  if (r.dead) return;
  r.dead = true;
  r.closed = true;
  r.died_at = now_ns_;
  r.lost_after = now_ns_ + std::max<int64_t>(detect_ns, 0);
  r.completions.clear();
  if (trace_) std::fprintf(trace_, "%lld kill %d\n", static_cast<long long>(now_ns_), rank);
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank) continue;
    Event e{};
    e.at = r.lost_after;
    e.kind = Kind::kLocal;
    e.rank = peer;
    e.completion = TransportCompletion{TransportCompletion::Kind::kPeerError, rank, 0, 0};
    push(e);
  }
}

Status SimNetwork::peer_error(int peer) const {
  if (peer >= 0 && peer < size_ && ranks_[peer].dead) {
    return make_status(StatusCode::kPeerFailed, "sim: rank %d died at %.3f ms (virtual time)", peer,
                       static_cast<double>(ranks_[peer].died_at) / 1e6);
  }
  return make_status(StatusCode::kPeerFailed, "sim: rank %d is not known to have failed", peer);
}

void SimNetwork::wait(int rank, std::chrono::nanoseconds timeout) {
  if (timed_) {
    if (timeout < std::chrono::hours(24 * 365)) {
      wake_at(rank, now_ns_ + std::max<int64_t>(timeout.count(), 0));
    }
    return;
  }
  std::unique_lock lock(setup_mu_);
  setup_cv_[rank]->wait_for(
      lock, std::min(timeout, std::chrono::nanoseconds(std::chrono::seconds(1))),
      [&] { return !ranks_[rank].completions.empty() || setup_woken_[rank]; });
  setup_woken_[rank] = 0;
}

void SimNetwork::wake(int rank) {
  if (timed_) {
    wake_at(rank, now_ns_);
    return;
  }
  std::lock_guard lock(setup_mu_);
  setup_woken_[rank] = 1;
  setup_cv_[rank]->notify_all();
}

void SimNetwork::wake_at(int rank, int64_t at_ns) {
  Rank& r = ranks_[rank];
  at_ns = std::max(at_ns, now_ns_);
  if (at_ns >= r.wake_at) return;  // an earlier one is coming
  r.wake_at = at_ns;
  Event e{};
  e.at = at_ns;
  e.kind = Kind::kWake;
  e.rank = rank;
  push(e);
}

size_t SimNetwork::poll(int rank, std::span<TransportCompletion> out) {
  std::unique_lock<std::mutex> setup;
  if (!timed_) setup = std::unique_lock(setup_mu_);
  Rank& r = ranks_[rank];
  size_t n = 0;
  while (n < out.size() && !r.completions.empty()) {
    out[n++] = r.completions.front();
    r.completions.pop_front();
  }
  return n;
}

size_t SimNetwork::queued_completions() const {
  std::unique_lock<std::mutex> setup;
  if (!timed_) setup = std::unique_lock(setup_mu_);
  size_t n = 0;
  for (const Rank& r : ranks_) n += r.completions.size();
  return n;
}

void SimNetwork::close(int rank) {
  std::unique_lock<std::mutex> setup;
  if (!timed_) setup = std::unique_lock(setup_mu_);
  ranks_[rank].closed = true;
}

bool SimNetwork::step(RankDriver& driver, int64_t until_ns) {
  if (events_.empty()) return false;
  const int64_t t = events_.top().at;
  if (t > until_ns) return false;
  now_ns_ = t;
  auto mark = [&](int rank) {
    if (ranks_[rank].runnable) return;
    ranks_[rank].runnable = true;
    runnable_.push_back(rank);
  };
  while (!events_.empty() && events_.top().at == t) {
    const Event e = events_.top();
    events_.pop();
    ++stats_.events;
    if (e.kind == Kind::kDeliver || e.kind == Kind::kLocal) --in_flight_;
    if (trace_) {
      static const char* const kNames[] = {"deliver", "done", "wake", "run"};
      std::fprintf(trace_, "%lld %s %d", static_cast<long long>(t),
                   kNames[static_cast<int>(e.kind)], e.rank);
      if (e.kind == Kind::kDeliver) {
        std::fprintf(trace_, " from %d tag 0x%08x", e.completion.peer, e.completion.tag);
      }
      std::fputc('\n', trace_);
    }
    Rank& r = ranks_[e.rank];
    switch (e.kind) {
      case Kind::kDeliver:
        if (r.closed) break;
        if (e.to && e.bytes && e.bytes > elide_bytes_) {
          // Elided: only the message's first page (the mailbox's slot and message headers).
          std::memcpy(e.to, e.from, std::min<size_t>(e.bytes, kElidedKeepBytes));
        } else if (e.to && e.bytes) {
          std::memcpy(e.to, e.from, e.bytes);
          ++payloads_delivered_;
          if (perturb_.corrupt_from && payloads_delivered_ >= perturb_.corrupt_from) {
            e.to[e.bytes / 2] ^= 0x40;
          }
        }
        r.completions.push_back(e.completion);
        // Taking a message in costs the receiver o before it can act on it; its bytes cost the
        // reduction (or copy) when the runtime hands them to their operation (took_in()).
        busy(e.rank, ns(model_.o_ns));
        r.acts_at = std::min(r.acts_at, r.cpu_free);
        mark(e.rank);
        break;
      case Kind::kLocal:
        if (r.closed) break;
        r.completions.push_back(e.completion);
        mark(e.rank);
        break;
      case Kind::kWake:
        if (r.wake_at <= t) r.wake_at = INT64_MAX;
        mark(e.rank);
        break;
      case Kind::kDriver:
        mark(e.rank);
        break;
    }
  }
  std::sort(runnable_.begin(), runnable_.end());
  if (perturb_.shuffle) std::shuffle(runnable_.begin(), runnable_.end(), rng_);
  std::vector<int> now_runnable;
  now_runnable.swap(runnable_);
  for (int rank : now_runnable) {
    Rank& r = ranks_[rank];
    r.runnable = false;
    if (r.dead) continue;
    // Busy (computing, or taking in earlier messages): it gets to them once it has taken in the
    // first, not once the CPU is idle: messages arriving every o or faster would otherwise hold
    // it off as long as they keep coming (a rank waited 2.5 us for redundant activations with
    // the one it needed taken in).
    const int64_t ready = std::min(r.cpu_free, r.acts_at);
    if (ready > t) {
      if (trace_) {
        std::fprintf(trace_, "%lld busy %d until %lld\n", static_cast<long long>(t), rank,
                     static_cast<long long>(ready));
      }
      wake_at(rank, ready);
      continue;
    }
    r.acts_at = INT64_MAX;
    driver.run(rank);
  }
  return true;
}

}  // namespace eagercomm::sim
