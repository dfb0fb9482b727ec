#include "collectives/engine/comm_core.h"

#include <sched.h>

#include <algorithm>
#include <thread>

#include "collectives/collective_log.h"
#include "collectives/engine/bootstrap.h"
#include "collectives/engine/control.h"
#include "collectives/engine/partner_layout.h"
#include "runtime/clock.h"
#include "runtime/deadline.h"
#include "transport/registry.h"

namespace eagercomm::detail {
namespace {

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
      notices_(rank),
      gone_(size),
      watchdog_(rank, size, config_, gone_,
                [this](int peer, const Status& why) { on_hung(peer, -1, why); }),
      partner_(size, 0),
      left_rank_(size, -1) {
  for (int peer : watchdog_.watched()) partner_[peer] = 1;
}

CommCore::~CommCore() {
  destroy();
  watchdog_.stop();  // when destroy() was skipped (a failed setup has no engine)
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
  Bootstrap boot(store, scope, rank, size, core->config_);
  Status s = core->setup(boot, in_process);
  if (!s.ok()) {
    boot.report_failure(s);
    return s;
  }
  EngineOptions eopts{config.spin, rank};
  // Ranks of inproc and shm worlds all share this host; elsewhere the launcher says how many do.
  const TransportCaps caps = core->transport_->capabilities();
  const bool all_local = caps.ranks_on_one_host;
  const int local = all_local ? size : static_cast<int>(std::max<uint32_t>(config.local_size, 1));
  const int cpus = usable_cpus();
  eopts.oversubscribed = local > cpus;
  if (eopts.oversubscribed) {
    EC_INFO(kInit, "%d ranks on this host, %d CPUs: idle waits yield the core at once", local,
            cpus);
  }
  // Read before the progress thread starts: from then on the driver owns the mailbox's stats.
  const MailboxStats mail = core->mailbox_->stats();
  core->engine_ = std::make_unique<Engine>(*core, eopts);
  if (config.progress_thread == ProgressThreadMode::kOn) core->engine_->start_thread();
  core->watchdog_.start(*core->engine_, *core->mailbox_, caps.ranks_in_one_process);
  EC_INFO(kInit,
          "communicator of %d ranks ready on transport %s (%s stores; data slots for %u peers, "
          "up to %u of %zu bytes each, control slots for the others; %.1f MiB registered)",
          size, core->transport_name_.c_str(), core->mailbox_->direct() ? "direct" : "staged",
          mail.data_peers, config.slots, config.slot_bytes,
          static_cast<double>(mail.registered_bytes) / (1 << 20));
  return core;
}

Status CommCore::setup(Bootstrap& boot, bool in_process) {
  EC_RETURN_IF_ERROR(boot.join());
  TransportParams params{rank_, size_, &config_, &boot.store(), boot.scope(), in_process};
  EC_ASSIGN_OR_RETURN(transport_name_, resolve_transport_name(config_.transport, params));
  EC_ASSIGN_OR_RETURN(transport_, create_transport(transport_name_, params));
  MailboxOptions mopts{config_.slot_bytes, config_.slots, config_.direct};
  // Ranks that share this process (inproc) keep full slots for every peer: the direct allreduce
  // sends its buffers' keys to all of them, and nothing is pinned. Elsewhere a rank registers
  // memory for its algorithms' partners and control slots for the rest (partner_layout.h).
  std::unique_ptr<MailboxLayout> layout;
  if (!transport_->maps_peer_memory()) {
    layout = partner_mailbox_layout(rank_, size_, SlotShape{config_.slots, config_.slot_bytes});
  }
  EC_ASSIGN_OR_RETURN(mailbox_, Mailbox::create(*transport_, mopts, std::move(layout)));
  EC_RETURN_IF_ERROR(make_small_boxes());
  ctx_ = OpContext{rank_,
                   size_,
                   mailbox_.get(),
                   transport_.get(),
                   &config_,
                   small_.get(),
                   transport_->capabilities().payloads_elided_above};
  return boot.connect(*transport_, *mailbox_, small_.get());
}

Status CommCore::make_small_boxes() {
  if (config_.small_max_bytes == 0 || size_ < 2 || size_ > SmallBoxes::kMaxRanks ||
      !transport_->maps_allocations()) {
    return Status::Ok();
  }
  EC_ASSIGN_OR_RETURN(small_, SmallBoxes::create(*transport_, config_.small_max_bytes));
  return Status::Ok();
}

void CommCore::submit(std::shared_ptr<Op> op, WakeDriver wake) {
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
  if (wake == WakeDriver::kYes) engine_->kick();
}

Status CommCore::run(std::shared_ptr<Op> op, WakeDriver wake, std::chrono::nanoseconds timeout) {
  if (destroyed()) return closed_status();
  Op* raw = op.get();
  const Status precheck = raw->precheck_error;
  submit(op, wake);  // `op` (ours) keeps it alive after the engine lets go
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
  if (!watchdog_.on()) {
    return Status(StatusCode::kTimeout,
                  text +
                      " (heartbeats are off here, so there is no report of who had not "
                      "arrived)");
  }
  // Who had not started it, from each peer's last heartbeat; the silent ones are listed apart.
  const std::string silent = silent_report();
  const std::string late = watchdog_.late_report(seq);
  if (late.empty() && silent.empty()) {
    text += "; every rank had started it (a peer is slow inside it, or data is lost)";
  }
  if (!late.empty()) text += "; ranks that had not started it: " + late;
  text += silent;
  return Status(StatusCode::kTimeout, text);
}

Status CommCore::abandon(Op& op, std::chrono::nanoseconds waited) {
  const Status why = timed_out(op, waited);
  engine_->run_exclusive([&] {
    while (Op* earlier = submissions_.pop()) begin(earlier);
    if (std::find(active_.begin(), active_.end(), &op) != active_.end())
      fail(&op, why, TellPeers::kYes);
  });
  // Peers that hold this rank's buffers release them within the drain bound (destroy()); one
  // still waiting for an earlier operation (a gap in the sequence) keeps its place, as before.
  if (!engine_->wait([&op] { return op.done(); }, RuntimeClock::now() + std::chrono::seconds(10))) {
    EC_WARN(kColl, "%s is still in flight after it timed out", describe(op.sig()).c_str());
  }
  return why;
}

Status CommCore::run_inline(std::shared_ptr<Op> op, std::chrono::nanoseconds timeout) {
  if (!op->precheck_error.ok() || !engine_->try_begin_driving()) {
    return run(std::move(op), WakeDriver::kNo, timeout);
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

bool CommCore::round_boxes_possible(size_t data_bytes) const {
  return config_.small_max_bytes != 0 && data_bytes <= config_.small_max_bytes && size_ >= 2 &&
         size_ <= SmallBoxes::kMaxRanks && transport_->maps_allocations();
}

Result<std::unique_ptr<SmallBoxes>> CommCore::make_round_boxes(size_t data_bytes, size_t bytes) {
  if (!round_boxes_possible(data_bytes)) return std::unique_ptr<SmallBoxes>();
  Result<std::unique_ptr<SmallBoxes>> out = Status(StatusCode::kInternal, "not run");
  engine_->run_exclusive([&] { out = SmallBoxes::create(*transport_, bytes); });
  return out;
}

Status CommCore::connect_round_boxes(SmallBoxes& boxes, int peer, std::span<const uint8_t> key) {
  Status out;
  engine_->run_exclusive([&] { out = boxes.connect_peer(peer, key); });
  return out;
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

void CommCore::detach_stream(uint32_t stream, std::string why) {
  engine_->run_exclusive([&] {
    streams_.erase(stream);
    detached_streams_.emplace_back(stream, std::move(why));
  });
}

void CommCore::start_stream_op(std::shared_ptr<Op> op) {
  Op* raw = op.get();
  raw->self = std::move(op);
  ++stats_.ops_started;
  active_.push_back(raw);
  if (Status s = raw->start(ctx_); !s.ok()) fail(raw, s, TellPeers::kYes);
}

MailboxStats CommCore::mailbox_stats() const {
  MailboxStats out;
  engine_->run_exclusive([&] {
    out = mailbox_->stats();
    // The transport's connections, not the mailbox's imports: a peer that only sends this rank
    // messages holds a connection here too (credits, its goodbye).
    out.connected_peers = transport_->connected_peers();
  });
  return out;
}

CoreStats CommCore::stats() const {
  CoreStats out;
  engine_->run_exclusive([&] { out = stats_; });
  return out;
}

}  // namespace eagercomm::detail
