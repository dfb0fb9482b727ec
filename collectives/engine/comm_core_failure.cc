#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "collectives/collective_log.h"
#include "collectives/engine/comm_core.h"
#include "collectives/engine/control.h"
#include "runtime/clock.h"

namespace eagercomm::detail {

void CommCore::fail(Op* op, const Status& status, TellPeers tell, int stopped_peer) {
  // Once only: failing an operation that failed already (it drains, or has completed) would
  // wait anew for peers that confirmed they stopped using its buffers, which never confirm
  // again (a stream's closed notice relayed after the closer's own error did that: 10 s per
  // destroy).
  if (!is_active(op)) return;
  const bool tell_peers = tell == TellPeers::kYes;
  // Peers that hold this rank's buffers (direct allreduce) must hear that it stopped, and this
  // rank must not report the failure before they stopped too: the caller may free its buffers
  // the moment the request completes.
  std::vector<int> users = op->peers_using_buffers();
  for (int g = 0; g < size_; ++g) {
    if (gone_.gone(g) || g == stopped_peer) std::erase(users, g);
  }
  if (tell_peers) {
    EC_WARN(kColl, "%s", status.message().c_str());
  } else {
    EC_DEBUG(kColl, "%s", status.message().c_str());
  }
  // An operation that shares buffers also tells peers that already left: a leaver waits, in
  // destroy(), for everyone to confirm they stopped touching its buffers.
  const bool shares = op->shares_buffers();
  // Its probes are moot now, and must not take the mailbox slots its error notice needs.
  notices_.drop_probes(op->key());
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
    // A plain collective's error reaches every rank along the partners (each rank that stops
    // it says so to its own): sending it to all would connect every pair (issue 21). Buffer
    // lenders' users and partial rounds, which do not pass errors on, hear it from here. So do
    // all peers where memory is mapped (inproc): a peer may run the direct allreduce there,
    // whose failure waits for every rank to say it stopped, this one included even when it ran
    // another call (mismatch_test at P = 12 waited for its timeout), and a pair costs nothing.
    const bool along_partners =
        key_stream(op->key()) == 0 && !shares && !transport_->maps_peer_memory();
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_ || (gone_.gone(peer) && !shares)) continue;
      if (along_partners && !tells_directly(peer)) continue;
      MsgHeader h;
      h.key = op->key();
      h.sig = op->sig();
      h.kind = static_cast<uint32_t>(MsgKind::kOpError);
      h.a = static_cast<uint32_t>(code);
      notices_.push(peer, h, text);
    }
  }
  op->drop_held(ctx_);
  ++stats_.ops_failed;
  auto it = std::find(active_.begin(), active_.end(), op);
  if (it != active_.end()) active_.erase(it);
  if (users.empty()) {
    complete_op(op, status);
  } else {
    draining_.add(op, status, std::move(users));
  }
  send_outgoing();
}

void CommCore::mark_gone(int peer, int64_t from, const Status& why) {
  if (!gone_.mark(peer, from, why)) return;  // gone already
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
    // Failing a stream's operation can end its others: those are gone (their arguments below
    // would read freed memory before fail() could skip them).
    if (!is_active(op)) continue;
    fail(op, key_stream(op->key()) == 0 ? gone_.status_for(key_seq(op->key())) : why,
         TellPeers::kNo);
  }
  release_lender(peer, std::nullopt);
  for (auto& [id, handler] : streams_) handler->on_peer_gone(peer, why);
}

void CommCore::on_hung(int peer, int told_by, const Status& why) {
  if (gone_.gone(peer)) return;  // the verdict (or an exit) reached this rank already
  // The verdict goes out before the operations fail: each partner then takes it in before the
  // errors this rank's failures send (per-pair order).
  const uint32_t verdict = control_word(ControlKind::kHung, static_cast<uint64_t>(peer));
  for (int partner : watchdog_.watched()) {
    if (partner == peer || partner == told_by || gone_.gone(partner)) continue;
    Status s = mailbox_->send_control(partner, verdict);
    if (!s.ok()) {
      EC_DEBUG(kColl, "hung verdict to rank %d: %s", partner, s.to_string().c_str());
    }
  }
  mark_gone(peer, 0, why);
}

void CommCore::release_lender(int peer, std::optional<OpKey> key) {
  draining_.release(peer, key, [this](Op* op, const Status& status) { complete_op(op, status); });
}

void CommCore::on_left_notice(int peer, uint32_t control) {
  const uint32_t arg = control_arg(control);
  if (control_kind(control) == ControlKind::kLeftRank) {
    left_rank_[peer] = static_cast<int>(arg);
    return;
  }
  const int leaver = left_rank_[peer];
  left_rank_[peer] = -1;
  if (leaver < 0 || leaver >= size_ || leaver == rank_) {
    EC_DEBUG(kColl, "an exit notice from rank %d names no leaver (%d)", peer, leaver);
    return;
  }
  const uint64_t from = widen_seq(arg);
  // Passed on whether or not this rank knew already: its subtree hears only through it.
  send_exit_tree(leaver, from);
  on_peer_exit(leaver, from);
}

void CommCore::send_exit_tree(int leaver, uint64_t from) {
  const uint32_t who = control_word(ControlKind::kLeftRank, static_cast<uint64_t>(leaver));
  const uint32_t when = control_word(ControlKind::kLeftFrom, from);
  for (int child : tree_children(leaver)) {
    if (child == rank_) continue;
    Status s = mailbox_->send_control(child, who);
    if (s.ok()) s = mailbox_->send_control(child, when);
    if (!s.ok()) {
      EC_DEBUG(kColl, "rank %d's exit to rank %d: %s", leaver, child, s.to_string().c_str());
    }
  }
}

std::vector<int> CommCore::tree_children(int origin) const {
  std::vector<int> out;
  // (distance from the origin, its lowest set bit) of the ranks whose children are wanted.
  std::vector<std::pair<int, int>> todo;
  const int d0 = (rank_ - origin + size_) % size_;
  todo.emplace_back(d0, d0 == 0 ? size_ : (d0 & -d0));
  while (!todo.empty()) {
    const auto [d, below] = todo.back();
    todo.pop_back();
    for (int i = 1; i < below && d + i < size_; i *= 2) {
      const int child = (origin + d + i) % size_;
      if (gone_.gone(child)) {
        todo.emplace_back(d + i, i);  // its children: d + i + j for every j < i
      } else {
        out.push_back(child);
      }
    }
  }
  return out;
}

int CommCore::toward(int target) const {
  if (target == rank_ || partner_[target]) return target;
  const int d = (rank_ - target + size_) % size_;
  return (target + (d - (d & -d))) % size_;
}

void CommCore::on_peer_exit(int peer, uint64_t from) {
  if (gone_.gone(peer)) return;  // heard already (directly and along the tree), or it failed
  EC_INFO(kColl, "rank %d left; collectives from %s on fail", peer, seq_text(from).c_str());
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
  const uint32_t arg = control_arg(control);
  switch (control_kind(control)) {
    case ControlKind::kPeerExit:
      on_peer_exit(peer, widen_seq(arg));
      break;
    case ControlKind::kLeftRank:
    case ControlKind::kLeftFrom:
      on_left_notice(peer, control);
      break;
    case ControlKind::kHeartbeat:
      watchdog_.on_heartbeat(peer, widen_seq(arg));
      break;
    case ControlKind::kEvicted:
      // This process was stopped (or starved) for longer than the peers' timeout: they have
      // given up on it, so nothing it starts can finish.
      EC_ERROR(kColl, "rank %d declared this rank hung after hearing nothing for %u s", peer, arg);
      mark_gone(peer, 0,
                make_status(StatusCode::kPeerFailed,
                            "rank %d declared rank %d hung after hearing nothing from it for %u s "
                            "(was this process stopped or starved?) and no longer takes part",
                            peer, rank_, arg));
      break;
    case ControlKind::kHung: {
      const int hung = static_cast<int>(arg);
      // About this rank itself: its watchers tell it directly (kEvicted).
      if (hung == rank_ || hung >= size_) break;
      if (gone_.gone(hung)) break;
      EC_ERROR(kColl,
               "rank %d is not responding: declared hung by the ranks that watch it (told by "
               "rank %d)",
               hung, peer);
      on_hung(
          hung, peer,
          make_status(StatusCode::kPeerFailed,
                      "rank %d is not responding: the ranks that watch it heard nothing from it "
                      "for EAGERCOMM_TIMEOUT (%s) and declared it hung (told by rank %d); it is "
                      "stopped, hung or unreachable",
                      hung, format_duration(config_.timeout).c_str(), peer));
      break;
    }
    default:
      EC_DEBUG(kColl, "unknown control 0x%x from rank %d", control, peer);
      break;
  }
}

std::vector<int> CommCore::gone_peers() {
  std::vector<int> out;
  auto read = [this, &out] {
    for (int peer = 0; peer < gone_.size(); ++peer) {
      if (gone_.gone(peer)) out.push_back(peer);
    }
  };
  // A closed engine has no driver left: what destroy() left is read as it is.
  if (engine_->closed()) {
    read();
  } else {
    engine_->run_exclusive(read);
  }
  return out;
}

void CommCore::abort(const std::string& reason) {
  if (!engine_ || destroy_started_.load(std::memory_order_acquire)) {
    destroy();  // waits for the first caller
    return;
  }
  {
    std::lock_guard lock(abort_mu_);  // orders abort_reason_ against a racing abort()
    if (abort_reason_.empty()) abort_reason_ = reason.empty() ? "no reason given" : reason;
  }
  destroy();
}

void CommCore::destroy() {
  if (!engine_) return;
  // Destructors run on any thread (the one that built an in-process world destroys all of its
  // ranks): the lines below are this rank's, whatever that thread's rank is.
  ScopedLogRank scoped(rank_);
  if (destroy_started_.exchange(true, std::memory_order_acq_rel)) {
    // Another thread is destroying: return when it has finished, as its caller will.
    while (!engine_->closed()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return;
  }
  watchdog_.stop();
  std::string reason;
  {
    std::lock_guard lock(abort_mu_);
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
      if (!is_active(op)) continue;  // ended by an earlier one's failure (the text reads op)
      fail(op,
           make_status(StatusCode::kAborted, "%s while %s %s was in flight", closed_text_.c_str(),
                       describe(op->sig()).c_str(), seq_text(key_seq(op->key())).c_str()),
           reason.empty() ? TellPeers::kNo
                          : TellPeers::kYes);  // an abort's reason reaches the peers' errors
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
    // Directly to the peers this rank exchanged messages with (the notice follows its last
    // message to each in the per-pair order; they may be waiting for one), along the exit tree
    // to everybody: the others then need no connection to this rank (issue 21).
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_ || !mailbox_->talked_to(peer)) continue;
      Status s = mailbox_->send_control(peer, control_word(ControlKind::kPeerExit, lowest));
      if (!s.ok()) EC_DEBUG(kColl, "exit notice to rank %d: %s", peer, s.to_string().c_str());
    }
    send_exit_tree(rank_, lowest);
    // Peers' queues may be full for a moment, or a connection still being made (verbs over
    // rdma_cm finishes connecting in poll(), and a communicator destroyed right after creation
    // may come here first): give the notices a bounded chance to go out. Without the transport
    // driven here, nobody drives it: a peer waiting in a collective heard nothing until its
    // hang detection.
    const auto deadline = RuntimeClock::now() + std::chrono::milliseconds(500);
    while (mailbox_->has_deferred() && RuntimeClock::now() < deadline) {
      if (mailbox_->flush()) continue;
      if (closing_pass() == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    drain_lent_buffers();
    // Leaving: peers learn that nothing more comes from or goes to this rank.
    transport_->close();
    EC_DEBUG(kInit, "communicator destroyed");
  });
}

size_t CommCore::closing_pass() {
  TransportCompletion buf[64];
  const size_t n = transport_->poll(buf);
  int events = 0;
  for (size_t i = 0; i < n; ++i) handle(buf[i], &events);
  mailbox_->flush();
  send_outgoing();
  take_mailbox_failures();
  return n;
}

void CommCore::drain_lent_buffers() {
  // Operations failed above that lent buffers to peers (direct allreduce) wait for those peers
  // to stop using them: the caller may free the buffers as soon as destroy() returns. Bounded,
  // because a dead peer writes nothing and never answers.
  const auto limit =
      config_.timeout > std::chrono::nanoseconds::zero()
          ? std::min<std::chrono::nanoseconds>(config_.timeout, std::chrono::seconds(10))
          : std::chrono::seconds(10);
  const auto deadline = RuntimeClock::now() + limit;
  if (!draining_.empty()) {
    EC_DEBUG(kColl, "waiting for peers to stop using the buffers of %zu collectives",
             draining_.size());
  }
  while (!draining_.empty() && RuntimeClock::now() < deadline) {
    if (closing_pass() == 0) transport_->wait(std::chrono::milliseconds(1));
  }
  if (!draining_.empty()) {
    EC_WARN(kColl,
            "destroyed with %zu collectives whose peers (ranks %s) did not confirm they "
            "stopped using this rank's buffers",
            draining_.size(), draining_.pending_ranks().c_str());
    draining_.abandon_all([this](Op* op, const Status& status) { complete_op(op, status); });
  }
}

}  // namespace eagercomm::detail
