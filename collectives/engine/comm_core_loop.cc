#include <algorithm>
#include <chrono>
#include <iterator>
#include <utility>
#include <vector>

#include "collectives/algorithms/algorithms.h"
#include "collectives/collective_log.h"
#include "collectives/engine/comm_core.h"
#include "collectives/engine/control.h"
#include "runtime/clock.h"

namespace eagercomm::detail {

int CommCore::progress() {
  int events = 0;
  while (Op* op = submissions_.pop()) {
    ++events;
    begin(op);
  }
  // The heartbeat duty comes after the transport was polled: what peers sent while this
  // process did not run must count before their silence is judged.
  const bool duty = watchdog_.duty_due();
  // While only small-box operations are in flight, their data needs no transport: look at the
  // transport (errors, peers' exits, messages of later calls) on every 16th pass only, which
  // takes its cost off the small operation's polling loop.
  const bool only_small =
      small_active_.load(std::memory_order_relaxed) == static_cast<int>(active_.size()) &&
      !active_.empty() && notices_.empty() && streams_.empty();
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
  if (duty) watchdog_.duty(begun_);
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
      fail(op, r.status(), TellPeers::kYes);
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
  // Peers that could not be reached on first use (their operations fail here, not at a
  // timeout).
  events += take_mailbox_failures();
  // Credits of released messages go out once there is nothing else to do (mailbox.h).
  if (events == 0 && mailbox_->return_due_credits()) ++events;
  return events;
}

// Signature probes. A mismatch is found where a message of one call reaches a rank running
// another (dispatch compares signatures), but mismatched calls can also wait on each other
// without any message crossing: a small allreduce waits in the boxes and sends nothing, a
// broadcast's non-root waits for its parent, recursive doubling's first step waits for a
// partner that runs a broadcast. So a plain collective that has waited EAGERCOMM_PROBE_AFTER (only
// while its driver idles: no clock is read on the fast path) sends its signature to its data
// partners (r +- 2^k), once; a peer running the same call with another signature fails it there
// and tells the others, and a peer that has not begun it compares when it does. Every edge of
// every algorithm (recursive doubling, the ring, binomial trees from any root, the chain) joins
// data partners, so the peer a call waits on is always probed, and a peer that waits in turn
// probes its own: along the chain of waits the mismatched rank is reached. A call that merely
// waits for a slow peer pays 2 log2 P small messages, once, and connects no other peer (issue
// 21: probing everybody connected every rank of a job with a straggler to every other).
std::chrono::nanoseconds CommCore::send_due_probes() {
  auto next = std::chrono::nanoseconds::max();
  const std::chrono::nanoseconds probe_after = config_.probe_after;
  if (size_ < 2 || probe_after == std::chrono::nanoseconds::zero()) return next;
  const auto now = RuntimeClock::now();
  for (Op* op : active_) {
    // Streams wait by design; a small-box allreduce is probed by its mismatched peers, and
    // compares signatures in the boxes with matching ones (its probes would only take slots).
    if (op->probe_next >= size_ || key_stream(op->key()) != 0 || op->uses_small_boxes()) continue;
    if (op->waiting_since == std::chrono::steady_clock::time_point{}) op->waiting_since = now;
    const auto due = op->waiting_since + probe_after;
    if (now < due) {
      next = std::min<std::chrono::nanoseconds>(next, due - now);
      continue;
    }
    // A probe takes a slot only where more than half are free: the notices that matter more
    // (an abandoned call's error, which an idle rank cannot resend) keep their room. The other
    // peers are probed on a later pass.
    for (; op->probe_next < size_; ++op->probe_next) {
      const int peer = op->probe_next;
      if (peer == rank_ || !partner_[peer] || gone_.gone(peer)) continue;
      if (mailbox_->credits(peer) <= mailbox_->slots(peer) / 2) break;
      MsgHeader h;
      h.key = op->key();
      h.sig = op->sig();
      h.kind = static_cast<uint32_t>(MsgKind::kProbe);
      notices_.push(peer, h);
      send_outgoing();
    }
    if (op->probe_next < size_) next = std::min<std::chrono::nanoseconds>(next, probe_after / 10);
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
           TellPeers::kYes);
    }
  }
}

std::chrono::nanoseconds CommCore::until_stream_due(std::chrono::nanoseconds timeout) const {
  const int64_t due = stream_due_ns_.load(std::memory_order_acquire);
  if (due == std::chrono::steady_clock::time_point::max().time_since_epoch().count()) {
    return timeout;
  }
  const int64_t now = RuntimeClock::now().time_since_epoch().count();
  return std::clamp(std::chrono::nanoseconds(due - now), std::chrono::nanoseconds(0), timeout);
}

void CommCore::block(std::chrono::nanoseconds timeout) {
  timeout = until_stream_due(std::min(timeout, send_due_probes()));
  // Deferred sends wait for room at a peer, which no notification announces: poll again soon.
  if (!notices_.empty() || mailbox_->has_deferred()) {
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

bool CommCore::small_news() {
  for (Op* op : active_) {
    if (op->uses_small_boxes() && op->has_news(ctx_)) return true;
  }
  return false;
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
    fail(op, s, TellPeers::kNo);
  } else if (Status gone = gone_.status_for(key_seq(key)); !gone.ok()) {
    fail(op, gone, TellPeers::kNo);
  } else if (!op->precheck_error.ok()) {
    fail(op, op->precheck_error, TellPeers::kYes);
  } else if (Status s = op->start(ctx_); !s.ok()) {
    fail(op, s, TellPeers::kYes);
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
    watchdog_.heard(c.peer);
  }
  MailboxEvent ev = mailbox_->on_completion(c);
  ++*events;
  switch (ev.kind) {
    case MailboxEvent::Kind::kNone:
      break;
    case MailboxEvent::Kind::kMessage: {
      const MsgHeader h = read_header(*ev.message);
      if (static_cast<MsgKind>(h.kind) == MsgKind::kStreamClosed) {
        // Relayed here, on arrival, not in dispatch: messages are dispatched again later
        // (replayed when their stream attaches or their operation starts).
        const InMessage& m = *ev.message;
        send_stream_closed(h, std::string_view(reinterpret_cast<const char*>(m.payload),
                                               std::min<size_t>(m.payload_bytes, 1024)));
      }
      dispatch(ev.message, h);
      break;
    }
    case MailboxEvent::Kind::kControl:
      on_control(ev.peer, ev.control);
      break;
    case MailboxEvent::Kind::kError:
      on_mailbox_error(ev);
      break;
  }
}

void CommCore::on_mailbox_error(const MailboxEvent& ev) {
  // A peer that breaks the protocol can no longer be trusted with any operation. The mailbox
  // found a protocol error (logged here, the first place that sees it); a lost peer was logged
  // by the transport with its cause, which the error carries (peer_error).
  if (ev.error.code() == StatusCode::kPeerFailed) {
    EC_DEBUG(kNet, "%s", ev.error.message().c_str());
  } else {
    EC_ERROR(kNet, "%s", ev.error.message().c_str());
  }
  if (ev.peer >= 0 && ev.peer < size_) {
    mark_gone(ev.peer, 0, ev.error);
  } else {
    std::vector<Op*> doomed = active_;
    for (Op* op : doomed) fail(op, ev.error, TellPeers::kNo);
  }
}

int CommCore::take_mailbox_failures() {
  if (!mailbox_->has_failures()) return 0;  // every progress pass asks: no event built for it
  int n = 0;
  MailboxEvent ev;
  while (mailbox_->take_failure(&ev)) {
    on_mailbox_error(ev);
    ++n;
  }
  return n;
}

void CommCore::dispatch(InMessage* m, const MsgHeader& h) {
  const auto kind = static_cast<MsgKind>(h.kind);
  auto op_error_status = [&] {
    const size_t n = std::min<size_t>(m->payload_bytes, 4096);
    std::string text(reinterpret_cast<const char*>(m->payload), n);
    const auto code =
        is_valid_status_code(h.a) ? static_cast<StatusCode>(h.a) : StatusCode::kPeerFailed;
    return Status(code, text);
  };
  // A stream's round shares its key with the round's data operation; only the operation's
  // messages belong to it (activations and closed notices go to the stream even while a failed
  // round drains: a closed notice swallowed there once left a peer waiting 30 s for its round).
  const uint32_t stream = key_stream(h.key);
  const bool for_op = kind == MsgKind::kData || kind == MsgKind::kOpError;
  if ((stream == 0 || for_op) && draining_.contains(h.key)) {
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
  if (stream != 0) {
    // Operation messages go to the operation; the rest (activations, arrivals, data for rounds
    // not started yet) to the stream's handler, or wait for it to attach.
    if (it == active_.end() || !for_op) {
      auto handler = streams_.find(stream);
      if (handler != streams_.end()) {
        handler->second->on_message(m, h);
      } else if (auto gone = std::find_if(detached_streams_.begin(), detached_streams_.end(),
                                          [&](const auto& d) { return d.first == stream; });
                 gone != detached_streams_.end()) {
        refuse(m, h, gone->second);  // the stream's object is gone: its rounds never run here
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
      EC_DEBUG(kColl, "dropped a message of rank %d for finished operation %s", m->peer,
               seq_text(seq).c_str());
      mailbox_->release(m);
    }
    return;
  }
  Op* op = *it;
  if (kind == MsgKind::kOpError) {
    Status s = op_error_status();
    const int peer = m->peer;
    mailbox_->release(m);
    fail(op, s, TellPeers::kNo, peer);  // the reporter has stopped using this rank's buffers
    return;
  }
  if (!(h.sig == op->sig())) {
    Status s = signature_mismatch(key_seq(h.key), m->peer, h.sig, rank_, op->sig());
    mailbox_->release(m);
    fail(op, s, TellPeers::kYes);
    return;
  }
  if (kind == MsgKind::kProbe) {  // the same call: nothing for the operation itself
    mailbox_->release(m);
    return;
  }
  transport_->took_in(m->payload_bytes);  // the simulated CPU pays the reduction now (else no-op)
  Status s = op->on_message(ctx_, Received{m, h});
  if (!s.ok()) {
    mailbox_->release(m);
    fail(op, s, TellPeers::kYes);
  }
}

void CommCore::refuse(InMessage* m, const MsgHeader& h, std::string_view why) {
  // A peer that lent this rank its buffers (step 0 of a direct operation) waits, when its own
  // operation fails, until this rank says it will not touch them: say so now, and why (this
  // may be the first the peer hears of the cause, which its error should name).
  if (static_cast<MsgKind>(h.kind) == MsgKind::kData && h.step == 0 &&
      h.sig.reserved == static_cast<uint8_t>(Algo::kDirect)) {
    MsgHeader reply = h;
    reply.kind = static_cast<uint32_t>(MsgKind::kOpError);
    reply.a = static_cast<uint32_t>(StatusCode::kPeerFailed);
    send_text(m->peer, reply,
              "rank " + std::to_string(rank_) + " does not run this round: " + std::string(why));
  }
  mailbox_->release(m);
}

uint64_t CommCore::widen_seq(uint32_t low24) const {
  const int64_t base = static_cast<int64_t>(begun_);
  int64_t candidate = (base & ~int64_t{0xffffff}) | low24;
  if (candidate - base > 0x800000) candidate -= 0x1000000;
  if (base - candidate > 0x800000) candidate += 0x1000000;
  return static_cast<uint64_t>(std::max<int64_t>(candidate, 0));
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

void CommCore::send_header(int peer, const MsgHeader& h) {
  notices_.push(peer, h);
  send_outgoing();
}

void CommCore::send_stream_closed(const MsgHeader& h, std::string_view cause) {
  if (h.step >= static_cast<uint32_t>(size_)) return;  // not relayed; the stream names the sender
  // Relative to the origin, rank d's children are d + 2^i for every 2^i below d's lowest set
  // bit (the origin, d = 0: every 2^i < P); each rank has exactly one parent.
  for (int child : tree_children(static_cast<int>(h.step))) send_text(child, h, std::string(cause));
}

void CommCore::send_text(int peer, const MsgHeader& h, std::string text) {
  notices_.push(peer, h, std::move(text));
  send_outgoing();
}

}  // namespace eagercomm::detail
