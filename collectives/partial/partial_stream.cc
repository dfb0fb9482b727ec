#include "collectives/partial/partial_stream.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "collectives/collective_log.h"
#include "collectives/engine/comm_core.h"
#include "collectives/partial/partial_meta.h"
#include "runtime/clock.h"

namespace eagercomm::detail {
namespace {

// Round r's allreduce has sequence 2r in the stream (odd sequences are unused: they carried a
// separate metadata allreduce before the metadata moved into the data's tail).
uint64_t round_of(OpKey key) { return key_seq(key) / 2; }

// adaptive: rounds per regime window (adaptive_regime.h): long enough to average out one slow
// step, short enough to follow a straggler that comes and goes within an epoch.
constexpr uint64_t kAdaptiveWindow = 16;

// Round boxes: the mark of a store (SmallBoxes::try_post): it activates the round, or it is a
// contribution made early, before the round is active (partial_stream.h).
constexpr uint32_t kActivates = 1;
constexpr uint32_t kEarly = 2;

// Round boxes: how soon to look again while a peer's box has no room (a peer frees its slot by
// a store that nobody announces; it lags SmallBoxes::kDepth rounds behind, so this is rare).
constexpr std::chrono::microseconds kRoomPoll(50);

}  // namespace

PartialStream::PartialStream(CommCore& core, std::shared_ptr<PartialShared> shared)
    : core_(core),
      shared_(std::move(shared)),
      P_(shared_->size),
      r_(shared_->rank),
      boxes_(shared_->round_boxes.get()),
      flood_order_(P_),
      peer_closed_(P_, false),
      flushing_(P_, 0) {
  if (shared_->mode.kind == PartialKind::kAdaptive) {
    // A window longer than the rounds a rank can be ahead of its deliveries (adaptive_regime.h).
    const uint64_t window =
        std::max<uint64_t>(kAdaptiveWindow, uint64_t{shared_->options.result_depth} + 2);
    regime_.emplace(P_, window, shared_->options.solo_speedup);
  }
  if (shared_->mode.kind == PartialKind::kDeadline && shared_->mode.deadline.count() == 0) {
    tuner_.emplace();
  }
  if (regime_) metas_.resize(static_cast<size_t>(P_));
  data_sig_.coll = static_cast<uint8_t>(CollKind::kAllreduce);
  data_sig_.dtype = static_cast<uint8_t>(shared_->type);
  data_sig_.redop = static_cast<uint8_t>(ReduceOp::kSum);
  data_sig_.count = shared_->count + meta_elements(shared_->type, P_, shared_->meta_compute());
  // The communicator's small boxes are numbered by its collective stream's sequence: rounds use
  // the object's own, when it has them.
  data_sig_.reserved = boxes_ ? static_cast<uint8_t>(Algo::kSmall)
                              : static_cast<uint8_t>(choose_allreduce(
                                    core_.config(), P_, shared_->bytes + shared_->tail_bytes,
                                    core_.payload_capacity(), core_.maps_peer_memory(), 0));
}

PartialStream::~PartialStream() {
  for (auto& [round, messages] : stashed_) {
    for (InMessage* m : messages) core_.refuse(m, read_header(*m), broken_why_.message());
  }
}

void PartialStream::send(int peer, MsgKind kind, uint64_t round, int root) {
  MsgHeader h;
  h.key = make_key(shared_->stream, 2 * round);
  h.sig = data_sig_;
  h.kind = static_cast<uint32_t>(kind);
  h.a = round;
  h.step = static_cast<uint32_t>(root);
  core_.send_header(peer, h);
}

void PartialStream::on_message(InMessage* m, const MsgHeader& h) {
  const auto kind = static_cast<MsgKind>(h.kind);
  const int peer = m->peer;
  switch (kind) {
    case MsgKind::kActivate:
      core_.release(m);
      if (h.a >= activated_ && h.a != heard_round_) {
        heard_round_ = h.a;
        heard_root_ = h.step < static_cast<uint32_t>(P_) ? static_cast<int>(h.step) : peer;
      }
      if (!closed_) want(h.a + 1);
      return;
    case MsgKind::kArrive: {
      // Relayed towards the coordinator along data partners (CommCore::toward): `step` names
      // the rank that posted.
      core_.release(m);
      const int origin = h.step < static_cast<uint32_t>(P_) ? static_cast<int>(h.step) : peer;
      if (closed_) return;
      if (const int c = shared_->coordinator(h.a); c != r_) {
        send(core_.toward(c), MsgKind::kArrive, h.a, origin);
      } else {
        count_arrival(h.a, origin);
      }
      return;
    }
    case MsgKind::kFlushing: {
      // It comes down the binomial tree rooted at the flushing rank (`step`): passed on first.
      core_.release(m);
      const int origin = h.step < static_cast<uint32_t>(P_) ? static_cast<int>(h.step) : peer;
      if (closed_) return;
      for (const int child : core_.tree_children(origin)) {
        send(child, MsgKind::kFlushing, h.a, origin);
      }
      if (h.a > flush_done_) {
        flushing_[origin] = std::max(flushing_[origin], h.a);
        reevaluate();
      }
      return;
    }
    case MsgKind::kStreamClosed: {
      // The notice carries why its origin stopped (another rank's death, say): that is the
      // cause this rank's error should name, not the messenger. It came down a tree
      // (CommCore::send_stream_closed): `peer` relayed it, `step` closed.
      const std::string cause(reinterpret_cast<const char*>(m->payload),
                              std::min<size_t>(m->payload_bytes, 1024));
      core_.release(m);
      const int origin = h.step < static_cast<uint32_t>(P_) ? static_cast<int>(h.step) : peer;
      peer_closed_[origin] = true;
      break_from(
          h.a,
          make_status(StatusCode::kPeerFailed,
                      "partial allreduce: rank %d stopped taking part before round "
                      "%llu (%s)%s",
                      origin, static_cast<unsigned long long>(h.a),
                      cause.empty() ? "it destroyed the object or its communicator" : cause.c_str(),
                      core_.silent_report().c_str()),
          h.b);
      return;
    }
    default:
      break;
  }
  // Data (or a failure notice) of a round whose operation is not running here.
  const uint64_t round = round_of(h.key);
  if (closed_ || round >= broken_from_) {
    core_.refuse(m, h, broken_why_.message());
    return;
  }
  auto it = rounds_.find(round);
  if (round < activated_ && (it == rounds_.end() || it->second.started)) {
    core_.release(m);  // the round's operations already finished: a late duplicate
    return;
  }
  // A data message of round r also activates r; it waits for the round's operation.
  want(round + 1);
  stashed_[round].push_back(m);
}

int PartialStream::advance() {
  int events = drain_events();
  if (boxes_) notice_box_arrivals();
  if (!deadlines_.empty()) events += expire_deadlines();
  while (activated_ < want_ && activate_next()) ++events;
  while (activated_ < early_ && activated_ >= want_ && activate_next(false)) ++events;
  events += start_taken();
  events += deliver();
  if (boxes_) watch_room();
  update_due();
  return events;
}

void PartialStream::start_deadline(uint64_t round) {
  if (shared_->mode.kind != PartialKind::kDeadline || synchronous(round)) return;
  if (deadlines_.count(round) != 0) return;
  std::chrono::microseconds t = shared_->mode.deadline;
  if (tuner_) {
    if (!tuner_->deadline()) return;  // nothing measured yet: the round waits for everybody
    t = *tuner_->deadline();
  }
  deadlines_[round] = RuntimeClock::now() + t;
}

int PartialStream::expire_deadlines() {
  const auto now = RuntimeClock::now();
  int n = 0;
  for (auto it = deadlines_.begin(); it != deadlines_.end() && it->second <= now;) {
    const uint64_t round = it->first;
    it = deadlines_.erase(it);
    if (closed_ || round < activated_) continue;
    EC_TRACE(kPartial, "partial allreduce: round %llu set off by its deadline",
             static_cast<unsigned long long>(round));
    arrivals_.erase(round);
    trigger(round);
    ++n;
  }
  return n;
}

void PartialStream::update_due() {
  auto due = room_due_;
  if (!deadlines_.empty()) {
    due =
        std::min(due, std::min_element(deadlines_.begin(), deadlines_.end(), [](auto& a, auto& b) {
                        return a.second < b.second;
                      })->second);
  }
  due_ = due;
}

void PartialStream::notice_box_arrivals() {
  if (closed_) return;
  // Peers store rounds in order, and a peer that stores round r + 1 has seen round r complete,
  // which took this rank's contribution to r. So among the rounds this rank has not entered, only
  // the first (`next`) can hold stores made early, the arrivals a coordinator counts; activating
  // stores are looked for from there on, as long as each round has one.
  const uint64_t next = activated_;
  const bool counts = counted(next) && shared_->coordinator(next) == r_;
  for (uint64_t round = std::max(want_, next); round < next + SmallBoxes::kDepth; ++round) {
    bool activates = false;
    for (int peer = 0; peer < P_; ++peer) {
      uint32_t mark = 0;
      if (peer == r_ || !boxes_->arrived(peer, round, &mark)) continue;
      if (mark == kActivates) activates = true;
      if (counts && round == next) count_arrival(round, peer);
    }
    if (!activates) return;
    want(round + 1);
  }
}

void PartialStream::watch_room() {
  bool waiting = false;
  for (const auto& [index, round] : rounds_) {
    if (round.data_op && round.data_op->waits_for_room()) {
      waiting = true;
      break;
    }
  }
  // The clock only while waiting: every progress pass comes here.
  if (waiting) {
    room_due_ = RuntimeClock::now() + kRoomPoll;
  } else if (room_due_ != std::chrono::steady_clock::time_point::max()) {
    room_due_ = std::chrono::steady_clock::time_point::max();
  }
}

int PartialStream::drain_events() {
  int n = 0;
  PartialEvent e;
  while (shared_->events.try_pop(e)) {
    ++n;
    if (closed_) continue;
    switch (e.kind) {
      case PartialEvent::Kind::kPosted:
        // Only a post meant for its round (fresh) sets a round off: a late post is this rank's
        // call for an iteration whose round has already run, and must not start a later one.
        if (e.fresh) {
          posted_ = true;
          last_posted_ = std::max(last_posted_, e.round);
        }
        if (counted(e.round)) {
          // Only fresh posts count towards a quorum; the round's coordinator counts them.
          if (!e.fresh) break;
          const int c = shared_->coordinator(e.round);
          if (c == r_) {
            count_arrival(e.round, r_);
          } else if (boxes_) {
            // Its store, made early, is the arrival the coordinator counts.
            early_ = std::max(early_, e.round + 1);
          } else {
            // Coordinators take turns over all ranks: the arrival goes along data partners (a
            // rank connects to O(log P) peers, not to every coordinator; issue 21).
            send(core_.toward(c), MsgKind::kArrive, e.round, r_);
          }
        } else {
          consider_trigger(e.round);
          // Not set off by this post (majority, not the initiator): its data goes out now.
          if (boxes_ && e.fresh) early_ = std::max(early_, e.round + 1);
        }
        break;
      case PartialEvent::Kind::kFlushing:
        flushing_[r_] = e.round;
        // Every rank must hear it; a tree of data partners carries it (issue 21).
        for (const int child : core_.tree_children(r_))
          send(child, MsgKind::kFlushing, e.round, r_);
        reevaluate();
        break;
      case PartialEvent::Kind::kForce:
        flush_rounds_[e.flush] = e.round;
        want(e.round + 1);
        break;
    }
  }
  return n;
}

void PartialStream::consider_trigger(uint64_t round) {
  if (round < activated_ && !entered_early(round)) return;
  if (!posted_ || last_posted_ < round) return;
  if (counted(round)) return;
  // Adaptive rounds that are not synchronous are solo rounds.
  if (shared_->mode.kind == PartialKind::kSolo || shared_->mode.kind == PartialKind::kAdaptive) {
    trigger(round);
  } else {
    const int initiator = shared_->initiator(round);
    if (initiator == r_ || flushing(initiator)) trigger(round);
  }
}

bool PartialStream::entered_early(uint64_t round) const {
  if (!boxes_ || round < want_ || round >= activated_) return false;
  auto it = rounds_.find(round);
  return it != rounds_.end() && !it->second.activating;
}

void PartialStream::trigger(uint64_t round) {
  const bool early = entered_early(round);
  want(round + 1);
  if (!early) return;
  Round& entered = rounds_.find(round)->second;
  entered.activating = true;
  if (!entered.started) return;  // its stores will carry the activating mark
  // Its stores went out tentative: the peers that wait for the round to activate hear it here
  // (whoever enters then activates it for everybody by its own stores).
  for (int peer = 0; peer < P_; ++peer) {
    if (peer != r_) send(peer, MsgKind::kActivate, round, r_);
  }
}

void PartialStream::count_arrival(uint64_t round, int peer) {
  if (round < activated_) return;  // already active
  std::vector<bool>& seen = arrivals_[round];
  if (seen.empty()) seen.assign(P_, false);
  if (tuner_ && !seen[peer]) {
    arrival_ns_[round].push_back(RuntimeClock::now().time_since_epoch().count());
  }
  seen[peer] = true;
  start_deadline(round);
  check_quorum(round);
}

void PartialStream::check_quorum(uint64_t round) {
  auto it = arrivals_.find(round);
  if (it == arrivals_.end()) return;
  if (round < activated_) {
    arrivals_.erase(it);
    return;
  }
  int count = 0;
  for (int i = 0; i < P_; ++i) count += it->second[i] || flushing(i);
  if (count >= quorum(round)) {
    arrivals_.erase(it);
    trigger(round);
  }
}

void PartialStream::reevaluate() {
  std::vector<uint64_t> pending;
  for (const auto& [round, seen] : arrivals_) pending.push_back(round);
  for (uint64_t round : pending) check_quorum(round);
  // A majority round this rank entered early, whose initiator now flushes, is set off here.
  for (uint64_t round = want_; round < activated_; ++round) {
    if (entered_early(round)) consider_trigger(round);
  }
  consider_trigger(activated_);
}

bool PartialStream::activate_next(bool activating) {
  if (closed_ || activated_ >= broken_from_) return false;
  uint32_t fresh_buffer = 0;
  if (!shared_->free_buffers.try_pop(fresh_buffer)) return false;  // back-pressure
  const uint64_t round = activated_;
  const uint64_t old = shared_->open.exchange(PartialShared::pack(round + 1, fresh_buffer),
                                              std::memory_order_seq_cst);
  if (PartialShared::open_round(old) != round) {
    EC_ERROR(kPartial, "partial allreduce: open round %llu, expected %llu",
             static_cast<unsigned long long>(PartialShared::open_round(old)),
             static_cast<unsigned long long>(round));
  }
  Round& entered = rounds_[round];
  entered.buffer = PartialShared::open_buffer(old);
  entered.activating = activating;
  activated_ = round + 1;
  shared_->activated.store(activated_, std::memory_order_release);
  arrivals_.erase(round);
  deadlines_.erase(round);
  if (auto it = arrival_ns_.find(round); it != arrival_ns_.end()) {
    spreads_[round] =
        DeadlineTuner::spread_us(it->second, P_, RuntimeClock::now().time_since_epoch().count());
    arrival_ns_.erase(it);
  }
  // A flush is over once its round is active here; its flushing marks no longer count.
  for (auto it = flush_rounds_.begin(); it != flush_rounds_.end() && it->second <= round;) {
    flush_done_ = std::max(flush_done_, it->first);
    it = flush_rounds_.erase(it);
  }
  flood(round);
  EC_TRACE(kPartial, "partial allreduce: round %llu active",
           static_cast<unsigned long long>(round));
  return true;
}

void PartialStream::flood(uint64_t round) {
  if (boxes_) return;  // the round's contribution in a peer's box activates it there
  // Tree order (flood_order.h), rooted at whoever set the round off as the first activation heard
  // of it says, or at this rank (it set the round off, or heard of it only through a later one).
  const int root = round == heard_round_ ? heard_root_ : r_;
  FloodOrder::Strides strides;
  const int n = flood_order_.strides((r_ - root + P_) % P_, &strides);
  for (int i = 0; i < n; ++i) send((r_ + strides[i]) % P_, MsgKind::kActivate, round, root);
}

int PartialStream::start_taken() {
  int n = 0;
  for (auto& [index, round] : rounds_) {
    if (round.started) continue;
    if (index >= broken_from_) break;
    // Posts that announced themselves on the buffer before it was taken finish first. Round
    // boxes need rounds started in order (see the header).
    if (shared_->buffers[round.buffer]->writers.load(std::memory_order_acquire) != 0) {
      if (boxes_) break;
      continue;
    }
    start(index, round);
    ++n;
  }
  return n;
}

void PartialStream::start(uint64_t index, Round& round) {
  ContributionBuffer& buf = *shared_->buffers[round.buffer];
  // A recycled buffer keeps its last result until a post overwrites it.
  if (buf.posts == 0 && shared_->bytes) std::memset(buf.data(), 0, shared_->bytes);
  // on_failure=continue: the data phase overwrites the contribution, which a survivor of a
  // failure of this round carries to the new group (partial_recovery.cc).
  if (!buf.backup.empty() && buf.posts > 0)
    std::memcpy(buf.backup.data(), buf.data(), shared_->bytes);
  buf.backup_posts = buf.posts;
  void* tail = shared_->tail(round.buffer);
  std::memset(tail, 0, shared_->tail_bytes);
  RankMeta mine;
  mine.fresh = buf.fresh;
  mine.age = buf.posts ? static_cast<int>(std::min<uint64_t>(index - buf.min_base, INT32_MAX)) : -1;
  mine.posts = static_cast<int>(std::min<uint32_t>(buf.posts, INT32_MAX));
  mine.compute_us = static_cast<uint32_t>(std::min<uint64_t>(buf.compute_us, UINT32_MAX));
  mine.measured = static_cast<int>(std::min<uint32_t>(buf.measured, INT32_MAX));
  if (tuner_) {
    // deadline(auto): the compute section carries the coordinator's arrival spread (measured 1)
    // in its slot, nothing in the others' (deadline_tuner.h).
    mine.compute_us = 0;
    mine.measured = 0;
    if (auto it = spreads_.find(index); it != spreads_.end()) {
      mine.compute_us = it->second;
      mine.measured = 1;
      spreads_.erase(it);
    }
  }
  write_rank_meta(tail, shared_->type, P_, r_, mine, shared_->meta_compute());
  round.started = true;

  std::shared_ptr<Op> data = boxes_ ? make_round_allreduce(data_sig_, buf.data(), boxes_, index,
                                                           round.activating ? kActivates : kEarly)
                                    : make_allreduce(data_sig_, buf.data(), buf.data());
  data->set_key(make_key(shared_->stream, 2 * index));
  data->keep_alive = shared_;
  round.data_op = data.get();
  core_.start_stream_op(std::move(data));

  auto stash = stashed_.find(index);
  if (stash != stashed_.end()) {
    std::vector<InMessage*> messages = std::move(stash->second);
    stashed_.erase(stash);
    for (InMessage* m : messages) core_.redispatch(m);
  }
}

void PartialStream::on_op_done(Op* op, const Status& status) {
  auto it = rounds_.find(round_of(op->key()));
  if (it == rounds_.end()) return;
  Round& round = it->second;
  round.data_done = true;
  round.data_op = nullptr;
  if (!status.ok() && round.status.ok()) {
    round.status = status;
    break_from(it->first, status);
  }
}

int PartialStream::deliver() {
  int n = 0;
  for (auto it = rounds_.find(delivered_); it != rounds_.end(); it = rounds_.find(delivered_)) {
    Round& round = it->second;
    if (delivered_ >= broken_from_ || !round.started || !round.data_done) {
      break;
    }
    RoundRecord record{delivered_, round.buffer};
    if (tuner_) {
      const RankMeta spread = read_rank_meta(shared_->tail(round.buffer), shared_->type, P_,
                                             shared_->coordinator(delivered_), true);
      if (spread.measured > 0) tuner_->observe(spread.compute_us);
    }
    if (regime_) {
      const void* tail = shared_->tail(round.buffer);
      for (int p = 0; p < P_; ++p) metas_[p] = read_rank_meta(tail, shared_->type, P_, p, true);
      regime_->observe(delivered_, metas_);
      if ((delivered_ + 1) % regime_->window() == 0) {
        EC_DEBUG(kPartial,
                 "adaptive: solo rounds predicted %.2fx per epoch: rounds from %llu run %s",
                 regime_->predicted_speedup(),
                 static_cast<unsigned long long>((delivered_ / regime_->window() + 2) *
                                                 regime_->window()),
                 regime_->solo((delivered_ / regime_->window() + 2) * regime_->window())
                     ? "solo"
                     : "synchronously");
      }
    }
    rounds_.erase(it);
    // The queue holds every buffer the object has, so it is never full.
    if (!shared_->results.try_push(std::move(record))) {
      EC_ERROR(kPartial, "partial allreduce result queue overflow");
    }
    ++delivered_;
    shared_->delivered.store(delivered_, std::memory_order_release);
    ++n;
  }
  if (delivered_ >= broken_from_ && !shared_->broken.load(std::memory_order_relaxed)) {
    // Everything before the failure is in the queue; now the application sees the failure.
    shared_->error = broken_why_;
    shared_->broken.store(true, std::memory_order_release);
    ++n;
  }
  if (n) core_.engine().notify_waiters();
  return n;
}

void PartialStream::break_from(uint64_t round, const Status& why, uint64_t spares_flush) {
  // A flush is spared when its round precedes the failure. A cause from a later round changes
  // nothing; one from the same round (the failed operations of the rounds a first cause broke
  // report back here) adds its own guarantee, and either suffices.
  if (round > broken_from_) return;
  spares_flush_ = round == broken_from_ ? std::max(spares_flush_, spares_flush) : spares_flush;
  shared_->failure_spares_flush.store(spares_flush_, std::memory_order_release);
  if (round == broken_from_) return;
  broken_from_ = round;
  broken_why_ = why;
  EC_DEBUG(kPartial, "partial allreduce fails from round %llu: %s",
           static_cast<unsigned long long>(round), why.to_string().c_str());
  for (auto& [index, r] : rounds_) {
    if (index < round) continue;
    // Failing an operation calls back into on_op_done, which clears these pointers.
    if (r.data_op) core_.fail_op(r.data_op, why, TellPeers::kNo);
  }
  for (auto it = stashed_.lower_bound(round); it != stashed_.end(); it = stashed_.erase(it)) {
    for (InMessage* m : it->second) core_.refuse(m, read_header(*m), why.message());
  }
  deliver();
}

void PartialStream::on_peer_gone(int peer, const Status& why) {
  // A peer that closed its stream first said from which round on (break_from ran then); the
  // rounds before that can still finish without it.
  if (!peer_closed_[peer]) break_from(delivered_, why);
}

std::vector<PartialStream::Orphan> PartialStream::orphans() const {
  std::vector<Orphan> out;
  for (const auto& [index, round] : rounds_) {
    const ContributionBuffer& buf = *shared_->buffers[round.buffer];
    const uint32_t posts = round.started ? buf.backup_posts : buf.posts;
    if (posts == 0) continue;
    out.push_back(Orphan{index, round.started ? buf.backup.data() : buf.data(), posts});
  }
  return out;
}

void PartialStream::on_closed() {
  close(Status(StatusCode::kAborted, "partial allreduce: the communicator was destroyed"));
}

void PartialStream::close(const Status& why) {
  if (closed_) return;
  closed_ = true;
  // Rounds before delivered_ are finished here (every message this rank owed them was sent);
  // from delivered_ on, peers cannot count on this rank.
  const uint64_t from = delivered_;
  // Peers inside a flush whose exchange this rank joined can still finish it (its round is
  // before `from` when this rank's flush returned): say how many exchanges it joined.
  MsgHeader h;
  h.key = make_key(shared_->stream, 2 * from);
  h.sig = data_sig_;
  h.kind = static_cast<uint32_t>(MsgKind::kStreamClosed);
  h.step = static_cast<uint32_t>(r_);
  h.a = from;
  h.b = shared_->flushes_joined.load(std::memory_order_acquire);
  const bool broken = broken_from_ != std::numeric_limits<uint64_t>::max();
  const Status& cause = broken ? broken_why_ : why;
  core_.send_stream_closed(h, cause.message());
  arrivals_.clear();
  deadlines_.clear();
  arrival_ns_.clear();
  spreads_.clear();
  break_from(from, why);
}

}  // namespace eagercomm::detail
