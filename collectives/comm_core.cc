#include "collectives/comm_core.h"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>

#include "collectives/algorithms.h"
#include "collectives/collective_log.h"
#include "runtime/deadline.h"
#include "transport/registry.h"

namespace eagercomm::detail {
namespace {

// Control codes (28 bits): kind in bits 27..24, argument in bits 23..0.
constexpr uint32_t kControlPeerExit = 1;   // argument: the first collective it will not run
constexpr uint32_t kControlHeartbeat = 2;  // argument: how many collectives it has begun
constexpr uint32_t kControlEvicted = 3;    // the sender declared the receiver hung

// Signature probes. A mismatch is found where a message of one call reaches a rank running
// another (dispatch compares signatures), but mismatched calls can also wait on each other
// without any message crossing: a small allreduce waits in the boxes and sends nothing, a
// broadcast's non-root waits for its parent, recursive doubling's first step waits for a
// partner that runs a broadcast. So a plain collective that has waited kProbeAfter (only while
// its driver idles: no clock is read on the fast path) sends its signature to every peer, once;
// a peer running the same call with another signature fails it there and tells everyone, and a
// peer that has not begun it compares when it does. A call that merely waits for a slow peer
// pays P-1 small messages, once.
constexpr std::chrono::milliseconds kProbeAfter(50);

// "2.3s": silences and waits as people read them (format_duration keeps every digit).
std::string seconds_text(std::chrono::nanoseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1fs", std::chrono::duration<double>(d).count());
  return buf;
}

int64_t steady_ns(Engine::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

std::string seq_text(uint64_t seq) { return "#" + std::to_string(seq); }

// CPUs this process may run on.
int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

CommCore::CommCore(int rank, int size, const Config& config)
    : rank_(rank),
      size_(size),
      config_(config),
      gone_from_(size, -1),
      gone_why_(size),
      heard_(size, 0),
      heard_seen_(size, 0),
      heard_at_(size),
      peer_heard_ns_(std::make_unique<std::atomic<int64_t>[]>(size)),
      peer_begun_(std::make_unique<std::atomic<uint64_t>[]>(size)) {}

CommCore::~CommCore() {
  destroy();
  stop_watchdog();  // when destroy() was skipped (a failed setup has no engine)
  // Before the members go (the mailbox first): peers must stop writing into its regions.
  if (transport_) transport_->close();
}

Result<std::shared_ptr<CommCore>> CommCore::create(Store& store, const std::string& scope, int rank,
                                                   int size, const Config& config,
                                                   bool in_process) {
  if (size < 1 || rank < 0 || rank >= size) {
    return make_status(StatusCode::kInvalidArgument, "communicator: rank %d of size %d", rank,
                       size);
  }
  std::shared_ptr<CommCore> core(new CommCore(rank, size, config));
  Status s = core->setup(store, scope, in_process);
  if (!s.ok()) {
    // Tell the ranks waiting for this one, so they fail now instead of at the timeout.
    (void)store.set(scope + "/failed/" + std::to_string(rank), to_bytes(s.to_string()));
    (void)store.add(scope + "/failed", 1);
    return s;
  }
  EngineOptions eopts{config.spin, rank};
  // Ranks of inproc and shm worlds all share this host; elsewhere the launcher says how many do.
  const bool all_local = core->transport_name_ == "inproc" || core->transport_name_ == "shm";
  const int local = all_local ? size : static_cast<int>(std::max<uint32_t>(config.local_size, 1));
  const int cpus = usable_cpus();
  eopts.oversubscribed = local > cpus;
  if (eopts.oversubscribed) {
    EC_INFO(kInit, "rank %d: %d ranks on this host, %d CPUs: idle waits yield the core at once",
            rank, local, cpus);
  }
  core->engine_ = std::make_unique<Engine>(*core, eopts);
  if (config.progress_thread == ProgressThreadMode::kOn) core->engine_->start_thread();
  core->start_watchdog();
  EC_INFO(kInit,
          "communicator rank %d of %d ready on transport %s (%s stores, %u slots of %zu "
          "bytes per peer)",
          rank, size, core->transport_name_.c_str(), core->mailbox_->direct() ? "direct" : "staged",
          config.slots, config.slot_bytes);
  return core;
}

Status CommCore::setup(Store& store, const std::string& scope, bool in_process) {
  EC_RETURN_IF_ERROR(join(store, scope));
  TransportParams params{rank_, size_, &config_, &store, scope, in_process};
  EC_ASSIGN_OR_RETURN(transport_name_, resolve_transport_name(config_.transport, params));
  EC_ASSIGN_OR_RETURN(transport_, create_transport(transport_name_, params));
  MailboxOptions mopts{config_.slot_bytes, config_.slots, config_.direct};
  EC_ASSIGN_OR_RETURN(mailbox_, Mailbox::create(*transport_, mopts));
  EC_RETURN_IF_ERROR(make_small_boxes());
  ctx_ = OpContext{rank_, size_, mailbox_.get(), transport_.get(), &config_, small_.get()};
  return connect(store, scope);
}

Status CommCore::make_small_boxes() {
  if (config_.small_max_bytes == 0 || size_ < 2 || size_ > SmallBoxes::kMaxRanks ||
      !transport_->maps_allocations()) {
    return Status::Ok();
  }
  EC_ASSIGN_OR_RETURN(small_, SmallBoxes::create(*transport_, config_.small_max_bytes));
  return Status::Ok();
}

Status CommCore::connect_small_boxes(Store& store, const std::string& scope) {
  for (int peer = 0; peer < size_ && small_; ++peer) {
    if (peer == rank_) continue;
    EC_ASSIGN_OR_RETURN(Bytes key,
                        store.get(scope + "/small/" + std::to_string(peer), config_.timeout));
    EC_RETURN_IF_ERROR(small_->connect_peer(peer, key));
  }
  return Status::Ok();
}

bool CommCore::small_news() {
  for (Op* op : active_) {
    if (op->uses_small_boxes() && op->has_news(ctx_)) return true;
  }
  return false;
}

Status CommCore::join(Store& store, const std::string& scope) {
  const std::string p = scope + "/";
  // Settings every rank must share, published before the size: once a rank's size is there,
  // so are they.
  const std::string small = std::to_string(config_.small_max_bytes);
  EC_RETURN_IF_ERROR(store.set(p + "smallmax/" + std::to_string(rank_), to_bytes(small)));
  EC_RETURN_IF_ERROR(
      store.set(p + "size/" + std::to_string(rank_), to_bytes(std::to_string(size_))));
  // Rank 0 exists in every world: comparing sizes with it first turns "started with different
  // world sizes" into an immediate error instead of a wait for ranks that will never come.
  if (rank_ != 0) {
    EC_ASSIGN_OR_RETURN(Bytes size0, store.get(p + "size/0", config_.timeout));
    if (to_string(size0) != std::to_string(size_)) {
      return make_status(StatusCode::kMismatch,
                         "bootstrap: rank 0 was started with world size %s, rank %d with %d",
                         to_string(size0).c_str(), rank_, size_);
    }
  }
  EC_RETURN_IF_ERROR(wait_for_all(store, scope, "size/"));
  for (int peer = 0; peer < size_; ++peer) {
    EC_ASSIGN_OR_RETURN(Bytes psize,
                        store.get(p + "size/" + std::to_string(peer), config_.timeout));
    if (to_string(psize) != std::to_string(size_)) {
      return make_status(StatusCode::kMismatch,
                         "bootstrap: rank %d was started with world size %s, rank %d with %d", peer,
                         to_string(psize).c_str(), rank_, size_);
    }
    EC_ASSIGN_OR_RETURN(Bytes psmall,
                        store.get(p + "smallmax/" + std::to_string(peer), config_.timeout));
    if (to_string(psmall) != small) {
      return make_status(StatusCode::kMismatch,
                         "bootstrap: rank %d has EAGERCOMM_SMALL_MAX_BYTES=%s, rank %d has %s (it "
                         "must be the same on every rank)",
                         peer, to_string(psmall).c_str(), rank_, small.c_str());
    }
  }
  return Status::Ok();
}

Status CommCore::wait_for_all(Store& store, const std::string& scope, const std::string& prefix) {
  const std::string p = scope + "/";
  std::vector<std::string> keys;
  for (int peer = 0; peer < size_; ++peer) keys.push_back(p + prefix + std::to_string(peer));
  // Wait in slices, looking between them for ranks that reported a failure to join.
  const auto deadline = deadline_after(config_.timeout);
  Status waited;
  for (;;) {
    waited = store.wait(keys, std::chrono::milliseconds(50));
    if (waited.code() != StatusCode::kTimeout) break;
    if (store.get(p + "failed", std::chrono::milliseconds(1)).ok()) {
      for (int peer = 0; peer < size_; ++peer) {
        auto why = store.get(p + "failed/" + std::to_string(peer), std::chrono::milliseconds(1));
        if (why.ok()) {
          return make_status(StatusCode::kPeerFailed, "bootstrap: rank %d failed to join: %s", peer,
                             to_string(why.value()).c_str());
        }
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
  }
  if (waited.ok() || waited.code() != StatusCode::kTimeout) return waited;
  std::string missing;
  for (int peer = 0; peer < size_; ++peer) {
    if (store.get(keys[peer], std::chrono::milliseconds(1)).ok()) continue;
    missing += (missing.empty() ? "" : ", ") + std::to_string(peer);
  }
  return make_status(StatusCode::kTimeout,
                     "bootstrap: rank %d waited %s for ranks that never joined: %s", rank_,
                     format_duration(config_.timeout).c_str(), missing.c_str());
}

Status CommCore::connect(Store& store, const std::string& scope) {
  const std::string p = scope + "/";
  const auto me = std::to_string(rank_);
  EC_RETURN_IF_ERROR(store.set(p + "addr/" + me, transport_->local_address()));
  if (small_) EC_RETURN_IF_ERROR(store.set(p + "small/" + me, small_->key()));
  // The inbox key goes last: its presence means the rank has published everything.
  EC_RETURN_IF_ERROR(store.set(p + "inbox/" + me, mailbox_->inbox_key()));
  EC_RETURN_IF_ERROR(wait_for_all(store, scope, "inbox/"));
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    const auto ps = std::to_string(peer);
    EC_ASSIGN_OR_RETURN(Bytes addr, store.get(p + "addr/" + ps, config_.timeout));
    EC_RETURN_IF_ERROR(transport_->connect(peer, addr));
    EC_ASSIGN_OR_RETURN(Bytes inbox, store.get(p + "inbox/" + ps, config_.timeout));
    EC_RETURN_IF_ERROR(mailbox_->connect_peer(peer, inbox));
  }
  // Nobody sends before every rank has connected to every peer: a verbs queue pair drops what
  // arrives before it is ready to receive (RTR), and the sender's retries run out in about half
  // a second, so a healthy but slower rank would be reported lost (issue 18, defect 2; perftest
  // and NCCL handshake once more after RTR for the same reason).
  EC_RETURN_IF_ERROR(store.set(p + "connected/" + me, to_bytes("1")));
  EC_RETURN_IF_ERROR(wait_for_all(store, scope, "connected/"));
  return connect_small_boxes(store, scope);
}

void CommCore::submit(std::shared_ptr<Op> op, bool kick) {
  Op* raw = op.get();
  raw->set_key(make_key(0, next_seq_.fetch_add(1, std::memory_order_relaxed)));
  raw->self = std::move(op);
  submitting_.fetch_add(1, std::memory_order_seq_cst);
  if (closing_.load(std::memory_order_seq_cst)) {
    submitting_.fetch_sub(1, std::memory_order_seq_cst);
    raw->complete(closed_status());
    raw->self.reset();
    return;
  }
  submissions_.push(raw);
  submitting_.fetch_sub(1, std::memory_order_seq_cst);
  if (kick) engine_->kick();
}

Status CommCore::run(std::shared_ptr<Op> op, bool kick, std::chrono::nanoseconds timeout) {
  if (destroyed()) return closed_status();
  Op* raw = op.get();
  const Status precheck = raw->precheck_error;
  submit(op, kick);  // `op` (ours) keeps it alive after the engine lets go
  if (!precheck.ok()) {
    engine_->try_progress();
    return precheck;
  }
  timeout = resolve(timeout);
  if (!engine_->wait([raw] { return raw->done(); }, deadline(timeout))) {
    return abandon(*raw, timeout);
  }
  return raw->status();
}

Engine::Clock::time_point CommCore::deadline(std::chrono::nanoseconds timeout) {
  return deadline_after(timeout);
}

Status CommCore::timed_out(const Op& op, std::chrono::nanoseconds waited) const {
  const uint64_t seq = key_seq(op.key());
  std::string text = describe(op.sig()) + " " + seq_text(seq) + " on rank " +
                     std::to_string(rank_) + " did not finish within " + format_duration(waited);
  if (key_stream(op.key()) != 0) return Status(StatusCode::kTimeout, text + silent_report());
  if (heartbeat_interval_ == std::chrono::nanoseconds::zero()) {
    return Status(StatusCode::kTimeout,
                  text +
                      " (heartbeats are off here, so there is no report of who had not "
                      "arrived)");
  }
  // Who had not started it, from each peer's last heartbeat; the silent ones are listed apart.
  const int64_t now = steady_ns(Engine::Clock::now());
  const std::string silent = silent_report();
  std::string late;
  for (int peer = 0; peer < size_; ++peer) {
    const int64_t age = now - peer_heard_ns_[peer].load(std::memory_order_relaxed);
    if (peer == rank_ || age > silent_after_ns()) continue;
    const uint64_t begun = peer_begun_[peer].load(std::memory_order_relaxed);
    if (begun > seq) continue;
    late += (late.empty() ? "rank " : ", rank ") + std::to_string(peer) +
            (begun == 0 ? " (alive, no collective started yet)"
                        : " (alive, last started " + seq_text(begun - 1) + ")");
  }
  if (late.empty() && silent.empty()) {
    text += "; every rank had started it (a peer is slow inside it, or data is lost)";
  }
  if (!late.empty()) text += "; ranks that had not started it: " + late;
  text += silent;
  return Status(StatusCode::kTimeout, text);
}

std::string CommCore::silent_report() const {
  if (heartbeat_interval_ == std::chrono::nanoseconds::zero()) return "";
  const int64_t now = steady_ns(Engine::Clock::now());
  std::string silent;
  for (int peer = 0; peer < size_; ++peer) {
    const int64_t age = now - peer_heard_ns_[peer].load(std::memory_order_relaxed);
    if (peer == rank_ || age <= silent_after_ns()) continue;
    silent += (silent.empty() ? "rank " : ", rank ") + std::to_string(peer) +
              " (nothing heard for " + seconds_text(std::chrono::nanoseconds(age)) + ")";
  }
  return silent.empty() ? "" : "; silent ranks: " + silent;
}

Status CommCore::abandon(Op& op, std::chrono::nanoseconds waited) {
  const Status why = timed_out(op, waited);
  engine_->run_exclusive([&] {
    while (Op* earlier = submissions_.pop()) begin(earlier);
    if (std::find(active_.begin(), active_.end(), &op) != active_.end()) fail(&op, why, true);
  });
  // Peers that hold this rank's buffers release them within the drain bound (destroy()); one
  // still waiting for an earlier operation (a gap in the sequence) keeps its place, as before.
  if (!engine_->wait([&op] { return op.done(); },
                     Engine::Clock::now() + std::chrono::seconds(10))) {
    EC_WARN(kColl, "rank %d: %s is still in flight after it timed out", rank_,
            describe(op.sig()).c_str());
  }
  return why;
}

Status CommCore::run_inline(std::shared_ptr<Op> op, std::chrono::nanoseconds timeout) {
  if (!op->precheck_error.ok() || !engine_->try_begin_driving()) {
    return run(std::move(op), false, timeout);
  }
  // The driver token keeps destroy() out until end_driving(): it closes the engine first.
  Op* raw = op.get();
  raw->set_key(make_key(0, next_seq_.fetch_add(1, std::memory_order_relaxed)));
  raw->self = op;
  while (Op* earlier = submissions_.pop()) begin(earlier);  // sequence order
  begin(raw);
  timeout = resolve(timeout);
  const auto until = deadline(timeout);
  const auto done = [raw] { return raw->done(); };
  const bool ok = engine_->drive_held(done, until);
  engine_->end_driving();
  if (!ok && !engine_->wait(done, until)) return abandon(*raw, timeout);
  return raw->status();
}

Result<std::unique_ptr<MemoryRegion>> CommCore::allocate(size_t bytes) {
  Result<std::unique_ptr<MemoryRegion>> out = Status(StatusCode::kInternal, "not run");
  engine_->run_exclusive([&] { out = transport_->allocate(bytes, MemoryKind::kHost); });
  return out;
}

Result<std::unique_ptr<SmallBoxes>> CommCore::make_round_boxes(size_t data_bytes, size_t bytes) {
  if (config_.small_max_bytes == 0 || data_bytes > config_.small_max_bytes || size_ < 2 ||
      size_ > SmallBoxes::kMaxRanks || !transport_->maps_allocations()) {
    return std::unique_ptr<SmallBoxes>();
  }
  Result<std::unique_ptr<SmallBoxes>> out = Status(StatusCode::kInternal, "not run");
  engine_->run_exclusive([&] { out = SmallBoxes::create(*transport_, bytes); });
  return out;
}

Status CommCore::connect_round_boxes(SmallBoxes& boxes, int peer, std::span<const uint8_t> key) {
  Status out;
  engine_->run_exclusive([&] { out = boxes.connect_peer(peer, key); });
  return out;
}

int CommCore::progress() {
  int events = 0;
  while (Op* op = submissions_.pop()) {
    ++events;
    begin(op);
  }
  // The heartbeat duty comes after the transport was polled: what peers sent while this
  // process did not run must count before their silence is judged.
  const bool duty = duty_due_.load(std::memory_order_relaxed);
  // While only small-box operations are in flight, their data needs no transport: look at the
  // transport (errors, peers' exits, messages of later calls) on every 16th pass only, which
  // takes its cost off the small operation's polling loop.
  const bool only_small =
      small_active_.load(std::memory_order_relaxed) == static_cast<int>(active_.size()) &&
      !active_.empty() && outgoing_.empty() && streams_.empty();
  if (!only_small || duty || (++small_passes_ & 15) == 0) {
    TransportCompletion buf[64];
    for (;;) {
      const size_t n = transport_->poll(buf);
      for (size_t i = 0; i < n; ++i) handle(buf[i], &events);
      if (n < std::size(buf)) break;
    }
    if (mailbox_->flush()) ++events;
    events += send_outgoing();
  }
  if (duty) heartbeat_duty();
  auto due = std::chrono::steady_clock::time_point::max();
  for (auto& [id, handler] : streams_) {
    events += handler->advance();
    due = std::min(due, handler->next_due());
  }
  // Written only when it changes: every progress pass comes here, and idle threads read it.
  const int64_t due_ns = due.time_since_epoch().count();
  if (stream_due_ns_.load(std::memory_order_relaxed) != due_ns) {
    stream_due_ns_.store(due_ns, std::memory_order_release);
  }
  for (size_t i = 0; i < active_.size();) {
    Op* op = active_[i];
    Result<int> r = op->advance(ctx_);
    if (!r.ok()) {
      fail(op, r.status(), true);
      ++events;
      continue;
    }
    events += *r;
    if (op->finished()) {
      finish(op);
      ++events;
      continue;
    }
    ++i;
  }
  // Credits of released messages go out once there is nothing else to do (mailbox.h).
  if (events == 0 && mailbox_->return_due_credits()) ++events;
  return events;
}

std::chrono::nanoseconds CommCore::send_due_probes() {
  auto next = std::chrono::nanoseconds::max();
  if (size_ < 2) return next;
  const auto now = std::chrono::steady_clock::now();
  for (Op* op : active_) {
    // Streams wait by design; a small-box allreduce is probed by its mismatched peers, and
    // compares signatures in the boxes with matching ones (its probes would only take slots).
    if (op->probe_next >= size_ || key_stream(op->key()) != 0 || op->uses_small_boxes()) continue;
    if (op->waiting_since == std::chrono::steady_clock::time_point{}) op->waiting_since = now;
    const auto due = op->waiting_since + kProbeAfter;
    if (now < due) {
      next = std::min<std::chrono::nanoseconds>(next, due - now);
      continue;
    }
    // A probe takes a slot only where more than half are free: the notices that matter more
    // (an abandoned call's error, which an idle rank cannot resend) keep their room. The other
    // peers are probed on a later pass.
    for (; op->probe_next < size_; ++op->probe_next) {
      const int peer = op->probe_next;
      if (peer == rank_ || gone_from_[peer] >= 0) continue;
      if (mailbox_->credits(peer) <= mailbox_->slots() / 2) break;
      MsgHeader h;
      h.key = op->key();
      h.sig = op->sig();
      h.kind = static_cast<uint32_t>(MsgKind::kProbe);
      outgoing_.push_back(Outgoing{peer, h, std::string()});
      send_outgoing();
    }
    if (op->probe_next < size_) next = std::min<std::chrono::nanoseconds>(next, kProbeAfter / 10);
  }
  return next;
}

void CommCore::check_early_probes(Op* op) {
  for (auto it = early_probes_.begin(); it != early_probes_.end();) {
    if (it->key != op->key()) {
      ++it;
      continue;
    }
    const EarlyProbe probe = *it;
    it = early_probes_.erase(it);
    if (!(probe.sig == op->sig()) && is_active(op)) {
      fail(op, signature_mismatch(key_seq(probe.key), probe.peer, probe.sig, rank_, op->sig()),
           true);
    }
  }
}

std::chrono::nanoseconds CommCore::until_stream_due(std::chrono::nanoseconds timeout) const {
  const int64_t due = stream_due_ns_.load(std::memory_order_acquire);
  if (due == std::chrono::steady_clock::time_point::max().time_since_epoch().count()) {
    return timeout;
  }
  const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  return std::clamp(std::chrono::nanoseconds(due - now), std::chrono::nanoseconds(0), timeout);
}

void CommCore::block(std::chrono::nanoseconds timeout) {
  timeout = until_stream_due(std::min(timeout, send_due_probes()));
  // Deferred sends wait for room at a peer, which no notification announces: poll again soon.
  if (!outgoing_.empty() || mailbox_->has_deferred()) {
    timeout = std::min<std::chrono::nanoseconds>(timeout, std::chrono::microseconds(50));
  }
  if (small_active_.load(std::memory_order_relaxed) > 0) {
    // Peers store small contributions without notifying the transport: sleep where they ring.
    small_->sleep(timeout, [this] { return small_news(); });
    return;
  }
  transport_->wait(timeout);
}

void CommCore::wait_for_work(std::chrono::nanoseconds timeout) {
  timeout = until_stream_due(timeout);
  if (small_ && small_active_.load(std::memory_order_acquire) > 0) {
    small_->sleep(timeout, [] { return false; });  // not the driver: cannot look at the ops
    return;
  }
  transport_->wait(timeout);
}

void CommCore::interrupt() {
  transport_->wake();
  // A driver asleep on the boxes has small operations active (it sleeps there only then).
  if (small_ && small_active_.load(std::memory_order_acquire) > 0) small_->wake_self();
}

void CommCore::begin(Op* op) {
  const uint64_t seq = key_seq(op->key());
  if (seq != begun_) {
    waiting_[seq] = op;
    return;
  }
  ++begun_;
  activate(op);
  for (auto it = waiting_.find(begun_); it != waiting_.end(); it = waiting_.find(begun_)) {
    Op* next = it->second;
    waiting_.erase(it);
    ++begun_;
    activate(next);
  }
}

void CommCore::activate(Op* op) {
  ++stats_.ops_started;
  // Only the driver writes it: a store, not a read-modify-write (this is on the small path).
  if (op->uses_small_boxes()) {
    small_active_.store(small_active_.load(std::memory_order_relaxed) + 1,
                        std::memory_order_release);
  }
  const OpKey key = op->key();
  active_.push_back(op);
  auto early = failed_early_.find(key);
  if (early != failed_early_.end()) {
    Status s = early->second;
    failed_early_.erase(early);
    fail(op, s, false);
  } else if (Status gone = gone_status(key_seq(key)); !gone.ok()) {
    fail(op, gone, false);
  } else if (!op->precheck_error.ok()) {
    fail(op, op->precheck_error, true);
  } else if (Status s = op->start(ctx_); !s.ok()) {
    fail(op, s, true);
  }
  if (!early_probes_.empty()) check_early_probes(op);
  if (!unexpected_.empty()) {
    // Borrowed, not referenced: dispatching can start a stream operation, which comes here
    // again.
    std::vector<InMessage*> mine = std::move(unexpected_scratch_);
    mine.clear();
    std::erase_if(unexpected_, [&](const std::pair<OpKey, InMessage*>& e) {
      if (e.first != key) return false;
      mine.push_back(e.second);
      return true;
    });
    for (InMessage* m : mine) dispatch(m);  // to the op, or dropped as stale if it failed
    unexpected_scratch_ = std::move(mine);
  }
}

void CommCore::handle(const TransportCompletion& c, int* events) {
  // Anything a peer sends shows it is alive (the heartbeat duty compares the counts).
  if (c.kind == TransportCompletion::Kind::kNotify && c.peer >= 0 && c.peer < size_) {
    ++heard_[c.peer];
  }
  MailboxEvent ev = mailbox_->on_completion(c);
  ++*events;
  switch (ev.kind) {
    case MailboxEvent::Kind::kNone:
      break;
    case MailboxEvent::Kind::kMessage:
      dispatch(ev.message);
      break;
    case MailboxEvent::Kind::kControl:
      on_control(ev.peer, ev.control);
      break;
    case MailboxEvent::Kind::kError: {
      // A peer that breaks the protocol can no longer be trusted with any operation. The
      // mailbox found a protocol error (logged here, the first place that sees it); a lost peer
      // was logged by the transport with its cause, which the error carries (peer_error).
      if (ev.error.code() == StatusCode::kPeerFailed) {
        EC_DEBUG(kNet, "%s", ev.error.message().c_str());
      } else {
        EC_ERROR(kNet, "%s", ev.error.message().c_str());
      }
      if (ev.peer >= 0 && ev.peer < size_) {
        mark_gone(ev.peer, 0, ev.error);
      } else {
        std::vector<Op*> doomed = active_;
        for (Op* op : doomed) {
          if (is_active(op)) fail(op, ev.error, false);
        }
      }
      break;
    }
  }
}

void CommCore::dispatch(InMessage* m) {
  const MsgHeader h = read_header(*m);
  const auto kind = static_cast<MsgKind>(h.kind);
  auto op_error_status = [&] {
    const size_t n = std::min<size_t>(m->payload_bytes, 4096);
    std::string text(reinterpret_cast<const char*>(m->payload), n);
    const auto code =
        is_valid_status_code(h.a) ? static_cast<StatusCode>(h.a) : StatusCode::kPeerFailed;
    return Status(code, text);
  };
  if (draining_.count(h.key)) {
    // A failed operation waiting for peers to stop using its buffers: a peer is done when it
    // says it finished its part (step 1 of the direct protocol) or failed the operation.
    const int peer = m->peer;
    const bool done = kind == MsgKind::kOpError || (kind == MsgKind::kData && h.step == 1);
    mailbox_->release(m);
    if (done) release_lender(peer, h.key);
    return;
  }
  // Operations in flight are few: a scan beats a hash table's node allocation per operation.
  const auto it = std::find_if(active_.begin(), active_.end(),
                               [&](const Op* op) { return op->key() == h.key; });
  if (const uint32_t stream = key_stream(h.key); stream != 0) {
    // Operation messages go to the operation; the rest (activations, arrivals, data for rounds
    // not started yet) to the stream's handler, or wait for it to attach.
    const bool for_op = kind == MsgKind::kData || kind == MsgKind::kOpError;
    if (it == active_.end() || !for_op) {
      auto handler = streams_.find(stream);
      if (handler != streams_.end()) {
        handler->second->on_message(m, h);
      } else if (std::find(detached_streams_.begin(), detached_streams_.end(), stream) !=
                 detached_streams_.end()) {
        mailbox_->release(m);
      } else {
        ++stats_.unexpected_messages;
        stream_unexpected_[stream].push_back(m);
      }
      return;
    }
  } else if (it == active_.end()) {
    const uint64_t seq = key_seq(h.key);
    if (seq >= begun_) {
      if (kind == MsgKind::kOpError) {
        Status s = op_error_status();
        failed_early_[h.key] = s;
        mailbox_->release(m);
      } else if (kind == MsgKind::kProbe) {
        // Kept as a signature, not as a message: a far-behind rank must not hold the slots
        // that the data of its earlier calls needs.
        early_probes_.push_back(EarlyProbe{h.key, m->peer, h.sig});
        mailbox_->release(m);
      } else {
        ++stats_.unexpected_messages;
        unexpected_.emplace_back(h.key, m);
      }
    } else {
      ++stats_.stale_messages;
      EC_DEBUG(kColl, "rank %d: dropped a message of rank %d for finished operation %s", rank_,
               m->peer, seq_text(seq).c_str());
      mailbox_->release(m);
    }
    return;
  }
  Op* op = *it;
  if (kind == MsgKind::kOpError) {
    Status s = op_error_status();
    const int peer = m->peer;
    mailbox_->release(m);
    fail(op, s, false, peer);  // the reporter has stopped using this rank's buffers
    return;
  }
  if (!(h.sig == op->sig())) {
    Status s = signature_mismatch(key_seq(h.key), m->peer, h.sig, rank_, op->sig());
    mailbox_->release(m);
    fail(op, s, true);
    return;
  }
  if (kind == MsgKind::kProbe) {  // the same call: nothing for the operation itself
    mailbox_->release(m);
    return;
  }
  Status s = op->on_message(ctx_, Received{m, h});
  if (!s.ok()) {
    mailbox_->release(m);
    fail(op, s, true);
  }
}

uint64_t CommCore::widen_seq(uint32_t low24) const {
  const int64_t base = static_cast<int64_t>(begun_);
  int64_t candidate = (base & ~int64_t{0xffffff}) | low24;
  if (candidate - base > 0x800000) candidate -= 0x1000000;
  if (base - candidate > 0x800000) candidate += 0x1000000;
  return static_cast<uint64_t>(std::max<int64_t>(candidate, 0));
}

Status CommCore::gone_status(uint64_t seq) const {
  for (int peer = 0; peer < size_; ++peer) {
    if (gone_from_[peer] >= 0 && seq >= static_cast<uint64_t>(gone_from_[peer])) {
      return make_status(gone_why_[peer].code(), "%s (collective %s cannot finish)",
                         gone_why_[peer].message().c_str(), seq_text(seq).c_str());
    }
  }
  return Status::Ok();
}

void CommCore::on_peer_exit(int peer, uint32_t low_seq) {
  const uint64_t from = widen_seq(low_seq);
  EC_INFO(kColl, "rank %d: rank %d left; collectives from %s on fail", rank_, peer,
          seq_text(from).c_str());
  // The leaver stopped touching this rank's buffers before it said goodbye (same thread, and
  // the notice follows its last write in the per-pair order): mark_gone releases them.
  // A leaver often leaves because of an error of its own, one this rank was about to report
  // too (a peer behind a cut link times out on every rank within milliseconds): the ranks
  // this one has not heard from are the likelier cause, so the error names them as well.
  mark_gone(peer, static_cast<int64_t>(from),
            make_status(StatusCode::kPeerFailed, "rank %d destroyed its communicator%s", peer,
                        silent_report().c_str()));
}

void CommCore::on_control(int peer, uint32_t control) {
  const uint32_t arg = control & 0xffffffu;
  switch (control >> 24) {
    case kControlPeerExit:
      on_peer_exit(peer, arg);
      break;
    case kControlHeartbeat:
      peer_begun_[peer].store(widen_seq(arg), std::memory_order_relaxed);
      break;
    case kControlEvicted:
      // This process was stopped (or starved) for longer than the peers' timeout: they have
      // given up on it, so nothing it starts can finish.
      EC_ERROR(kColl, "rank %d: rank %d declared this rank hung after hearing nothing for %u s",
               rank_, peer, arg);
      mark_gone(peer, 0,
                make_status(StatusCode::kPeerFailed,
                            "rank %d declared rank %d hung after hearing nothing from it for %u s "
                            "(was this process stopped or starved?) and no longer takes part",
                            peer, rank_, arg));
      break;
    default:
      EC_DEBUG(kColl, "rank %d: unknown control 0x%x from rank %d", rank_, control, peer);
      break;
  }
}

void CommCore::mark_gone(int peer, int64_t from, const Status& why) {
  if (gone_from_[peer] >= 0 && gone_from_[peer] <= from) return;  // gone already
  gone_from_[peer] = from;
  gone_why_[peer] = why;
  std::vector<Op*> doomed;
  for (Op* op : active_) {
    // Streams' operations are the handlers' business (on_peer_gone), unless nothing of the
    // peer can be trusted any more (from 0: a transport error, a hung peer).
    const bool collective = key_stream(op->key()) == 0;
    if ((collective && key_seq(op->key()) >= static_cast<uint64_t>(from)) ||
        (!collective && from == 0)) {
      doomed.push_back(op);
    }
  }
  for (Op* op : doomed) {
    if (!is_active(op)) continue;  // failing a stream's operation can end its others
    fail(op, key_stream(op->key()) == 0 ? gone_status(key_seq(op->key())) : why, false);
  }
  release_lender(peer, std::nullopt);
  for (auto& [id, handler] : streams_) handler->on_peer_gone(peer, why);
}

// Heartbeats. A rank whose process stops (SIGSTOP, a debugger, a host that froze or lost its
// link) neither dies nor closes a connection, so neither liveness beacons nor the transport
// notice it. Every `heartbeat_interval_` the watchdog thread makes the driver send each peer a
// notification carrying how many collectives this rank has begun, and look at what it heard:
// any notification counts, so a busy pair adds nothing but a counter increment per
// notification. A peer silent for `hang_after_` (EAGERCOMM_TIMEOUT, at least three intervals)
// is declared hung: every operation that needs it fails with kPeerFailed naming it, and it is
// told (should it run again, its own operations fail the same way instead of waiting for
// peers that gave up on it). The watchdog thread drives only when nobody else does, so a rank
// whose application computes outside eagercomm still answers; it never waits for the token.
void CommCore::start_watchdog() {
  if (config_.heartbeat <= std::chrono::nanoseconds::zero() ||
      config_.timeout <= std::chrono::nanoseconds::zero() || transport_name_ == "inproc" ||
      size_ < 2) {
    return;  // threads of one process cannot stop one by one; 0 means "wait forever"
  }
  heartbeat_interval_ = std::min(config_.heartbeat, config_.timeout / 4);
  hang_after_ = std::max(config_.timeout, 3 * heartbeat_interval_);
  const auto now = Engine::Clock::now();
  last_duty_at_ = now;
  for (int peer = 0; peer < size_; ++peer) {
    heard_at_[peer] = now;
    peer_heard_ns_[peer].store(steady_ns(now), std::memory_order_relaxed);
  }
  watchdog_ = std::thread([this] { watchdog_main(); });
}

void CommCore::stop_watchdog() {
  if (!watchdog_.joinable()) return;
  {
    std::lock_guard lock(watchdog_mu_);
    watchdog_stop_ = true;
  }
  watchdog_cv_.notify_all();
  if (watchdog_.get_id() == std::this_thread::get_id()) {
    watchdog_.detach();  // cannot happen today: the watchdog never destroys
  } else {
    watchdog_.join();
  }
}

void CommCore::watchdog_main() {
  log_set_thread_rank(rank_);
  std::unique_lock lock(watchdog_mu_);
  while (!watchdog_stop_) {
    watchdog_cv_.wait_for(lock, heartbeat_interval_);
    if (watchdog_stop_) break;
    lock.unlock();
    duty_due_.store(true, std::memory_order_relaxed);
    engine_->try_progress();
    // Another thread drives: it does the duty on its next pass; wake it if it sleeps.
    if (duty_due_.load(std::memory_order_relaxed)) engine_->kick();
    lock.lock();
  }
}

void CommCore::heartbeat_duty() {
  duty_due_.store(false, std::memory_order_relaxed);
  const auto now = Engine::Clock::now();
  // This process itself did not run for a while (stopped, starved, a suspended VM): the
  // peers' silence may be its own. Judge them from a fresh window.
  const bool was_frozen = now - last_duty_at_ > 3 * heartbeat_interval_;
  last_duty_at_ = now;
  const uint32_t beat = (kControlHeartbeat << 24) | static_cast<uint32_t>(begun_ & 0xffffffu);
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_ || gone_from_[peer] >= 0) continue;
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
      EC_ERROR(kColl, "rank %d: %s", rank_, why.message().c_str());
      mark_gone(peer, 0, why);
      const auto secs = static_cast<uint32_t>(std::min<int64_t>(
          std::chrono::duration_cast<std::chrono::seconds>(silent).count(), 0xffffff));
      (void)mailbox_->send_control(peer, (kControlEvicted << 24) | secs);
      continue;
    }
    // A peer that does not take its notifications gets no more of them queued.
    if (mailbox_->has_deferred(peer)) continue;
    Status s = mailbox_->send_control(peer, beat);
    if (!s.ok()) {
      EC_DEBUG(kColl, "rank %d: heartbeat to rank %d: %s", rank_, peer, s.to_string().c_str());
    }
  }
}

void CommCore::fail(Op* op, const Status& status, bool tell_peers, int stopped_peer) {
  // Peers that hold this rank's buffers (direct allreduce) must hear that it stopped, and this
  // rank must not report the failure before they stopped too: the caller may free its buffers
  // the moment the request completes.
  std::vector<int> users = op->peers_using_buffers();
  for (int g = 0; g < size_; ++g) {
    if (gone_from_[g] >= 0 || g == stopped_peer) std::erase(users, g);
  }
  if (tell_peers) {
    EC_WARN(kColl, "rank %d: %s", rank_, status.message().c_str());
  } else {
    EC_DEBUG(kColl, "rank %d: %s", rank_, status.message().c_str());
  }
  // An operation that shares buffers also tells peers that already left: a leaver waits, in
  // destroy(), for everyone to confirm they stopped touching its buffers.
  const bool shares = op->shares_buffers();
  // Its probes are moot now, and must not take the mailbox slots its error notice needs.
  std::erase_if(outgoing_, [&](const Outgoing& o) {
    return o.header.key == op->key() && o.header.kind == static_cast<uint32_t>(MsgKind::kProbe);
  });
  // A rank that stops a plain collective because a peer reported a failure says so too: a peer
  // whose buffers others may hold (direct allreduce) completes its failure only once every rank
  // has said it stopped (the reporter included: it may share buffers too), and this rank may be
  // one that never got its keys, whose own report it would otherwise wait for until the
  // timeout. (Partial rounds, on streams, have their own closing protocol.)
  if (tell_peers || shares || key_stream(op->key()) == 0) {
    const std::string text = "rank " + std::to_string(rank_) +
                             (tell_peers ? " reported: " : " stopped: ") + status.message();
    // The cause travels on (a mismatch stays a mismatch); this rank's own abort is, for the
    // peers, a peer failure.
    const auto code =
        status.code() == StatusCode::kAborted ? StatusCode::kPeerFailed : status.code();
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_ || (gone_from_[peer] >= 0 && !shares)) continue;
      MsgHeader h;
      h.key = op->key();
      h.sig = op->sig();
      h.kind = static_cast<uint32_t>(MsgKind::kOpError);
      h.a = static_cast<uint32_t>(code);
      outgoing_.push_back(Outgoing{peer, h, text});
    }
  }
  op->drop_held(ctx_);
  ++stats_.ops_failed;
  auto it = std::find(active_.begin(), active_.end(), op);
  if (it != active_.end()) active_.erase(it);
  if (users.empty()) {
    complete_op(op, status);
  } else {
    draining_[op->key()] = Draining{op, status, std::move(users)};
  }
  send_outgoing();
}

void CommCore::release_lender(int peer, std::optional<OpKey> key) {
  for (auto it = draining_.begin(); it != draining_.end();) {
    if (!key || it->first == *key) std::erase(it->second.pending, peer);
    if (!it->second.pending.empty()) {
      ++it;
      continue;
    }
    Op* op = it->second.op;
    const Status status = it->second.status;
    it = draining_.erase(it);
    complete_op(op, status);
  }
}

void CommCore::finish(Op* op) { complete_op(op, Status::Ok()); }

void CommCore::complete_op(Op* op, const Status& status) {
  op->complete(status);
  const uint32_t stream = key_stream(op->key());
  if (stream != 0) {
    auto it = streams_.find(stream);
    if (it != streams_.end()) it->second->on_op_done(op, status);
  }
  retire(op);
}

void CommCore::retire(Op* op) {
  auto it = std::find(active_.begin(), active_.end(), op);
  if (it != active_.end()) active_.erase(it);
  if (op->uses_small_boxes()) {
    small_active_.store(small_active_.load(std::memory_order_relaxed) - 1,
                        std::memory_order_release);
  }
  std::shared_ptr<Op> keep = std::move(op->self);  // may be the last reference
  engine_->notify_waiters();
}

int CommCore::send_outgoing() {
  int sent = 0;
  for (auto it = outgoing_.begin(); it != outgoing_.end();) {
    SendSlot slot;
    if (!mailbox_->try_acquire(it->peer, &slot)) {
      ++it;
      continue;
    }
    std::memcpy(slot.user_header, &it->header, sizeof(MsgHeader));
    const size_t n = std::min(it->text.size(), mailbox_->payload_capacity());
    std::memcpy(slot.payload, it->text.data(), n);
    Status s = mailbox_->send(slot, n);
    if (!s.ok() && transport_->peer_left(it->peer)) {
      // A peer that left needs no notice (a normal shutdown, ranks leaving in any order).
      EC_DEBUG(kColl, "rank %d: no notice to rank %d, which left: %s", rank_, it->peer,
               s.to_string().c_str());
    } else if (!s.ok()) {
      EC_WARN(kColl, "rank %d: could not send a notice to rank %d: %s", rank_, it->peer,
              s.to_string().c_str());
    }
    it = outgoing_.erase(it);
    ++sent;
  }
  return sent;
}

void CommCore::send_header(int peer, const MsgHeader& h) {
  outgoing_.push_back(Outgoing{peer, h, {}});
  send_outgoing();
}

void CommCore::send_text(int peer, const MsgHeader& h, std::string text) {
  outgoing_.push_back(Outgoing{peer, h, std::move(text)});
  send_outgoing();
}

Status CommCore::attach_stream(uint32_t stream, StreamHandler* handler) {
  if (destroyed()) return closed_status();
  engine_->run_exclusive([&] {
    streams_[stream] = handler;
    auto it = stream_unexpected_.find(stream);
    if (it == stream_unexpected_.end()) return;
    std::vector<InMessage*> early = std::move(it->second);
    stream_unexpected_.erase(it);
    for (InMessage* m : early) dispatch(m);
  });
  return Status::Ok();
}

void CommCore::detach_stream(uint32_t stream) {
  engine_->run_exclusive([&] {
    streams_.erase(stream);
    detached_streams_.push_back(stream);
  });
}

void CommCore::start_stream_op(std::shared_ptr<Op> op) {
  Op* raw = op.get();
  raw->self = std::move(op);
  ++stats_.ops_started;
  active_.push_back(raw);
  if (Status s = raw->start(ctx_); !s.ok()) fail(raw, s, true);
}

void CommCore::abort(const std::string& reason) {
  if (!engine_ || destroy_started_.load(std::memory_order_acquire)) {
    destroy();  // waits for the first caller
    return;
  }
  {
    std::lock_guard lock(watchdog_mu_);  // orders abort_reason_ against a racing abort()
    if (abort_reason_.empty()) abort_reason_ = reason.empty() ? "no reason given" : reason;
  }
  destroy();
}

void CommCore::destroy() {
  if (!engine_) return;
  if (destroy_started_.exchange(true, std::memory_order_acq_rel)) {
    // Another thread is destroying: return when it has finished, as its caller will.
    while (!engine_->closed()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return;
  }
  stop_watchdog();
  std::string reason;
  {
    std::lock_guard lock(watchdog_mu_);
    reason = abort_reason_;
  }
  closed_text_ = reason.empty() ? std::string("the communicator was destroyed")
                                : "the communicator was aborted on rank " + std::to_string(rank_) +
                                      ": " + reason;
  closing_.store(true, std::memory_order_seq_cst);
  engine_->close([this, &reason] {
    while (submitting_.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
    while (Op* op = submissions_.pop()) waiting_[key_seq(op->key())] = op;
    // Streams first: they tell their peers which rounds they will not finish (in order before
    // the exit notice below).
    for (auto& [id, handler] : streams_) handler->on_closed();
    uint64_t lowest = begun_;
    for (Op* op : active_) {
      if (key_stream(op->key()) == 0) lowest = std::min(lowest, key_seq(op->key()));
    }
    std::vector<Op*> doomed = active_;
    for (Op* op : doomed) {
      if (!is_active(op)) continue;
      fail(op,
           make_status(StatusCode::kAborted, "%s while %s %s was in flight", closed_text_.c_str(),
                       describe(op->sig()).c_str(), seq_text(key_seq(op->key())).c_str()),
           /*tell_peers=*/!reason.empty());  // an abort's reason reaches the peers' errors
    }
    for (auto& [seq, op] : waiting_) {
      op->complete(closed_status());
      op->self.reset();
    }
    waiting_.clear();
    for (auto& [key, m] : unexpected_) mailbox_->release(m);
    unexpected_.clear();
    for (auto& [id, messages] : stream_unexpected_) {
      for (InMessage* m : messages) mailbox_->release(m);
    }
    stream_unexpected_.clear();
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      Status s = mailbox_->send_control(peer, (kControlPeerExit << 24) | (lowest & 0xffffffu));
      if (!s.ok())
        EC_DEBUG(kColl, "rank %d: exit notice to rank %d: %s", rank_, peer, s.to_string().c_str());
    }
    // Peers' queues may be full for a moment; give the notices a bounded chance to go out.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    while (mailbox_->has_deferred() && std::chrono::steady_clock::now() < deadline) {
      if (!mailbox_->flush()) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    drain_lent_buffers();
    // Leaving: peers learn that nothing more comes from or goes to this rank.
    transport_->close();
    EC_DEBUG(kInit, "rank %d: communicator destroyed", rank_);
  });
}

void CommCore::drain_lent_buffers() {
  // Operations failed above that lent buffers to peers (direct allreduce) wait for those peers
  // to stop using them: the caller may free the buffers as soon as destroy() returns. Bounded,
  // because a dead peer writes nothing and never answers.
  const auto limit =
      config_.timeout > std::chrono::nanoseconds::zero()
          ? std::min<std::chrono::nanoseconds>(config_.timeout, std::chrono::seconds(10))
          : std::chrono::seconds(10);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  if (!draining_.empty()) {
    EC_DEBUG(kColl, "rank %d: waiting for peers to stop using the buffers of %zu collectives",
             rank_, draining_.size());
  }
  TransportCompletion buf[64];
  while (!draining_.empty() && std::chrono::steady_clock::now() < deadline) {
    const size_t n = transport_->poll(buf);
    int events = 0;
    for (size_t i = 0; i < n; ++i) handle(buf[i], &events);
    mailbox_->flush();
    send_outgoing();
    if (n == 0) transport_->wait(std::chrono::milliseconds(1));
  }
  if (!draining_.empty()) {
    EC_WARN(kColl,
            "rank %d: destroyed with %zu collectives whose peers did not confirm they "
            "stopped using this rank's buffers",
            rank_, draining_.size());
    std::map<OpKey, Draining> left = std::move(draining_);
    draining_.clear();
    for (auto& [key, d] : left) complete_op(d.op, d.status);
  }
}

MailboxStats CommCore::mailbox_stats() const {
  MailboxStats out;
  engine_->run_exclusive([&] { out = mailbox_->stats(); });
  return out;
}

CoreStats CommCore::stats() const {
  CoreStats out;
  engine_->run_exclusive([&] { out = stats_; });
  return out;
}

}  // namespace eagercomm::detail
