// Internal: the engine side of a partial allreduce. Not installed.
//
// Runs the rounds of one PartialAllreduce: decides when a round activates (from this rank's
// posts, the activation flood, coordinators' quorum counts and deadlines, data of the round
// arriving), takes
// the open contribution, starts the round's allreduce (the data, with this rank's metadata in its
// tail: partial_meta.h), and
// delivers results in round order. Called only by the engine's current driver.
//
// Activation travels as a flood: a rank that activates round r for any reason sends an
// activation to ranks rank + d 4^i (mod P), d = 1, 2, -1, for every such stride below P. Every
// activated rank forwards once, so the activated set is closed under those edges and, from any
// initiator, reaches every rank within ceil(log4 P) hops; several initiators of the same round
// are harmless (a rank enters a round once). The sends go out in the order of a radix-4 tree
// rooted at whoever set the round off (flood_order.h): the last rank hears after ceil(log4 P)
// hops of L + 2o and two o each (9.0 us at P = 1024 in the simulation, HDR; the binomial tree of
// strides 2^k took 14.1 us, in rank order 22.6 us at P = 256). Rounds activate in order on every
// rank: hearing of round r activates every earlier round not yet active (with whatever
// contribution is open, possibly nothing).
//
// Rounds through boxes (PartialShared::round_boxes): a rank that starts round r stores its
// contribution into every peer's box of r, marked activating or early. An activating store of
// round r in a rank's box activates r there: one hop from whoever set the round off, no flood and
// no message. A rank whose fresh post does not set its round off (majority: not the initiator;
// quorum and synchronous rounds: not the coordinator) enters the round early, at once: its
// store activates nothing, but its data is in place when the round does activate, so a majority
// round completes one hop after its initiator's post. A coordinator counts the stores in its own
// boxes as arrivals (no arrival messages). Rounds start in order, so a peer's first store this
// rank has not seen is always of the lowest round it has not entered.

#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "collectives/algorithms/algorithms.h"
#include "collectives/engine/stream_handler.h"
#include "collectives/partial/adaptive_regime.h"
#include "collectives/partial/deadline_tuner.h"
#include "collectives/partial/flood_order.h"
#include "collectives/partial/partial_shared.h"

namespace eagercomm::detail {

class CommCore;

class PartialStream final : public StreamHandler {
 public:
  PartialStream(CommCore& core, std::shared_ptr<PartialShared> shared);
  ~PartialStream() override;

  void on_message(InMessage* m, const MsgHeader& h) override;
  int advance() override;
  void on_op_done(Op* op, const Status& status) override;
  void on_peer_gone(int peer, const Status& why) override;
  void on_closed() override;
  std::chrono::steady_clock::time_point next_due() const override { return due_; }

  // This rank stops: rounds not finished here fail, peers learn from which round on. Idempotent.
  void close(const Status& why);
  // Why rounds fail here (after close(): its cause, or the earlier failure that came first).
  const Status& failure() const { return broken_why_; }
  // After close(), on_failure=continue: the contributions of the rounds entered here and not
  // delivered that held posts (the round's buffer, or its copy when the round had started).
  struct Orphan {
    uint64_t round = 0;
    const void* data = nullptr;  // PartialShared::bytes
    uint32_t posts = 0;
  };
  std::vector<Orphan> orphans() const;

 private:
  struct Round {
    uint32_t buffer = 0;
    bool activating = true;  // round boxes: entered because the round is active (not early)
    bool started = false;
    bool data_done = false;
    Op* data_op = nullptr;
    Status status;
  };

  int drain_events();
  // Round boxes: rounds that peers' activating stores set off are wanted; a coordinator counts
  // the stores of its next round as arrivals.
  void notice_box_arrivals();
  // Round boxes: sets due_ (soon) while a started round waits for room in a peer's box.
  void watch_room();
  // Enters the next round (`activating`: because it is active; else early: round boxes).
  bool activate_next(bool activating = true);
  int start_taken();
  void start(uint64_t index, Round& round);
  int deliver();
  void flood(uint64_t round);
  void want(uint64_t end) { want_ = std::max(want_, end); }
  // This rank sets `round` off (its post does, or its count reached the quorum): want() it, and
  // if it entered the round early, the round becomes activating here, and if its tentative
  // stores are already out, the peers get activation messages. Earlier rounds have triggers of
  // their own: a fresh post for round r comes after its poster took r - 1's result, so every
  // rank had entered r - 1 (a quorum is made of such posts; a flush enters every round itself).
  void trigger(uint64_t round);
  // Round boxes: `round` was entered here early and is not known to be active yet.
  bool entered_early(uint64_t round) const;
  void count_arrival(uint64_t round, int peer);
  void check_quorum(uint64_t round);
  // Who activates what: synchronous rounds (sync, sync_every, adaptive rounds its regime runs
  // synchronously) and quorum rounds are counted by their coordinator; the rest are solo or
  // majority rounds.
  bool synchronous(uint64_t round) const {
    return shared_->synchronous(round) || (regime_ && !regime_->solo(round));
  }
  bool counted(uint64_t round) const {
    return synchronous(round) || shared_->mode.kind == PartialKind::kQuorum ||
           shared_->mode.kind == PartialKind::kDeadline;
  }
  int quorum(uint64_t round) const {
    return !synchronous(round) && shared_->mode.kind == PartialKind::kQuorum ? shared_->mode.quorum
                                                                             : P_;
  }
  // deadline(T): a round this rank coordinates and that is not synchronous gets its timer with
  // the first arrival counted (none while deadline(auto) has no T yet).
  void start_deadline(uint64_t round);
  // deadline(T): sets off the rounds whose timer ran out; returns how many.
  int expire_deadlines();
  // next_due(): the earliest of the room poll and the deadlines.
  void update_due();
  // Activates `round` if this rank's posts in it are what the mode waits for (also a round it
  // entered early).
  void consider_trigger(uint64_t round);
  // Flushing ranks post no more: quorums count them, majority rounds whose initiator flushes
  // activate on any post (so ranks still in their loop never wait for a flushing rank).
  void reevaluate();
  bool flushing(int rank) const { return flushing_[rank] > flush_done_; }
  // Fails rounds from `round` on. `spares_flush` > 0: the cause is a peer that left after joining
  // flush exchanges up to that number (see PartialShared::failure_spares_flush).
  void break_from(uint64_t round, const Status& why, uint64_t spares_flush = 0);
  // `root`: an activation's tree root (flood()), in the header's step.
  void send(int peer, MsgKind kind, uint64_t round, int root = 0);

  CommCore& core_;
  std::shared_ptr<PartialShared> shared_;
  const int P_;
  const int r_;
  OpSignature data_sig_;     // the round's allreduce: the data, then the metadata tail
  SmallBoxes* const boxes_;  // the object's round boxes, or null
  const FloodOrder flood_order_;
  std::chrono::steady_clock::time_point due_ = std::chrono::steady_clock::time_point::max();

  // The first activation heard of the latest round not yet entered, and the rank at the root of
  // its tree (flood()).
  uint64_t heard_round_ = std::numeric_limits<uint64_t>::max();
  int heard_root_ = 0;
  uint64_t activated_ = 0;  // rounds entered here
  uint64_t want_ = 0;       // rounds that should be entered (back-pressure may hold them back)
  uint64_t early_ = 0;      // round boxes: rounds to enter early, on this rank's fresh posts
  uint64_t delivered_ = 0;  // rounds handed to the application queue
  std::map<uint64_t, Round> rounds_;                // entered, not delivered
  std::map<uint64_t, std::vector<bool>> arrivals_;  // coordinator: fresh posts per round
  std::optional<AdaptiveRegime> regime_;            // adaptive: solo or synchronous rounds
  std::optional<DeadlineTuner> tuner_;              // deadline(auto): T
  std::vector<RankMeta> metas_;                     // adaptive: a delivered round's metadata
  // deadline(T), coordinator: when each counted round not yet active is set off regardless.
  std::map<uint64_t, std::chrono::steady_clock::time_point> deadlines_;
  // deadline(auto), coordinator: when the fresh posts of rounds not yet active arrived (ns), and
  // the spread of rounds activated, not yet started, that their metadata will carry.
  std::map<uint64_t, std::vector<int64_t>> arrival_ns_;
  std::map<uint64_t, uint32_t> spreads_;
  std::chrono::steady_clock::time_point room_due_ = std::chrono::steady_clock::time_point::max();
  std::map<uint64_t, std::vector<InMessage*>> stashed_;  // messages of rounds not started
  uint64_t broken_from_ = std::numeric_limits<uint64_t>::max();
  Status broken_why_;
  uint64_t spares_flush_ = 0;  // the flushes the failure from broken_from_ spares
  std::vector<bool> peer_closed_;
  bool closed_ = false;
  bool posted_ = false;
  uint64_t last_posted_ = 0;                   // latest round this rank posted fresh into
  std::vector<uint64_t> flushing_;             // per rank: number of the flush it is in (0: none)
  uint64_t flush_done_ = 0;                    // flushes whose round has activated here
  std::map<uint64_t, uint64_t> flush_rounds_;  // flush number -> its round
};

}  // namespace eagercomm::detail
