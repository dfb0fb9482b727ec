// Internal: the engine-side half of a Communicator. Not installed.
//
// Owns the transport endpoint, the mailbox and the engine; routes every arrived message to its
// operation by key after checking the signature; fails operations on every rank when one rank
// finds a problem; and implements ProgressSource for the engine. Its parts:
//   bootstrap.h          joining the world and connecting to every peer (during create())
//   liveness_watchdog.h  heartbeats and the watchdog that declares silent peers hung
//   failure_state.h      the peers that are gone, and failed operations that wait for peers to
//                        stop using their buffers; comm_core_failure.cc fails operations,
//                        handles peers' exits and control notices, destroys
//   notice_queue.h       header-only and short-text messages waiting for a slot
//   comm_core.cc         creation, submission and blocking runs, streams
//   comm_core_loop.cc    progress: beginning operations, polling, dispatching messages
#pragma once

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/config.h"
#include "collectives/engine/failure_state.h"
#include "collectives/engine/liveness_watchdog.h"
#include "collectives/engine/notice_queue.h"
#include "collectives/engine/op.h"
#include "collectives/engine/small_boxes.h"
#include "collectives/engine/stream_handler.h"
#include "runtime/engine.h"
#include "runtime/mpsc_queue.h"
#include "runtime/store.h"
#include "transport/mailbox.h"
#include "transport/transport.h"

namespace eagercomm::detail {

class Bootstrap;

struct CoreStats {
  uint64_t ops_started = 0;
  uint64_t ops_failed = 0;
  uint64_t stale_messages = 0;
  uint64_t unexpected_messages = 0;
};

// Whether failing an operation makes every other rank fail it too (with this rank's message).
enum class TellPeers : bool { kNo = false, kYes = true };

class CommCore final : public ProgressSource {
 public:
  // Connects to every peer through `store` (keys under `scope`). Blocks until all peers have
  // published their addresses, or the configured timeout (the error names the missing ranks).
  static Result<std::shared_ptr<CommCore>> create(Store& store, const std::string& scope, int rank,
                                                  int size, const Config& config,
                                                  bool in_process = false);
  ~CommCore() override;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const Config& config() const { return config_; }
  const std::string& transport_name() const { return transport_name_; }
  size_t payload_capacity() const { return mailbox_->payload_capacity(); }
  bool maps_peer_memory() const { return transport_->maps_peer_memory(); }
  // Largest allreduce contribution the small boxes take (0: this communicator has none).
  size_t small_max_bytes() const { return small_ ? small_->max_bytes() : 0; }
  Engine& engine() { return *engine_; }

  // Whether submit() wakes a driver asleep in the engine: kNo when the caller is about to drive
  // progress itself.
  enum class WakeDriver : uint8_t { kNo, kYes };
  // Numbers `op` in the collective stream and hands it to the engine. Any thread.
  void submit(std::shared_ptr<Op> op, WakeDriver wake = WakeDriver::kYes);
  // submit(), then waits for the operation, driving progress inline, for `timeout`
  // (kConfiguredTimeout: EAGERCOMM_TIMEOUT; kWaitForever or -1: no limit). At the timeout the
  // operation is abandoned (see abandon()) and the error names the ranks that had not arrived.
  Status run(std::shared_ptr<Op> op, WakeDriver wake = WakeDriver::kYes,
             std::chrono::nanoseconds timeout = kConfiguredTimeout);
  // run() for latency-bound calls: when the engine is free, this thread takes the token, numbers
  // and begins the operation itself (no submission queue, no wake-up) and drives it to the end.
  Status run_inline(std::shared_ptr<Op> op, std::chrono::nanoseconds timeout = kConfiguredTimeout);
  // A blocking call gave up on `op` after `waited`: fails it on every rank (the peers' calls
  // fail with this rank's report instead of waiting for it) and waits until no peer uses its
  // buffers any more, so the caller may free them. Returns the timeout's error: the straggler
  // report (timed_out()).
  Status abandon(Op& op, std::chrono::nanoseconds waited);
  // The error of a wait for `op` that gave up after `waited`. For the collective stream it
  // names the ranks that had not started the operation and those that went silent, as of
  // their last heartbeats (the straggler report). Any thread.
  Status timed_out(const Op& op, std::chrono::nanoseconds waited) const;
  // "; silent ranks: rank 2 (nothing heard for 3.1s)" for peers whose heartbeats stopped
  // coming, or "" (none, or heartbeats off). Any thread.
  std::string silent_report() const { return watchdog_.silent_report(); }
  // EAGERCOMM_TIMEOUT for kConfiguredTimeout (0), else `timeout` (negative: forever).
  std::chrono::nanoseconds resolve(std::chrono::nanoseconds timeout) const {
    return timeout == kConfiguredTimeout ? config_.timeout : timeout;
  }
  // Registered transport memory for a runtime-owned buffer (zeroed). Any thread.
  Result<std::unique_ptr<MemoryRegion>> allocate(size_t bytes);
  // Boxes of a partial allreduce whose rounds carry `data_bytes` of data (`bytes` with the
  // metadata): made when the transport maps allocations, the world has 2 .. SmallBoxes::kMaxRanks
  // ranks and the data fits EAGERCOMM_SMALL_MAX_BYTES (null otherwise: the rounds then run as
  // messages); the same settings give every rank the same answer. Any thread.
  Result<std::unique_ptr<SmallBoxes>> make_round_boxes(size_t data_bytes, size_t bytes);
  // Whether make_round_boxes() would try at all (the conditions above; the same on every rank).
  bool round_boxes_possible(size_t data_bytes) const;
  // Maps `peer`'s boxes of the same object into `boxes`. Any thread.
  Status connect_round_boxes(SmallBoxes& boxes, int peer, std::span<const uint8_t> key);

  // Fails every pending operation, tells the peers, releases the transport. Idempotent; any
  // thread, also while others wait (they return with kAborted); a second caller returns once
  // the first has finished.
  void destroy();
  // destroy() whose errors (kAborted here, kPeerFailed at the peers) carry `reason`.
  void abort(const std::string& reason);
  bool destroyed() const { return engine_->closed(); }
  // The error of calls made after destroy() or abort() (kAborted, with the abort's reason).
  Status closed_status() const { return Status(StatusCode::kAborted, closed_text_); }

  MailboxStats mailbox_stats() const;
  CoreStats stats() const;

  // ---- Streams besides the collective stream (partial allreduce objects) ----
  // A new stream id (application thread; ranks that create their objects in the same order
  // get the same ids).
  uint32_t new_stream_id() { return next_stream_.fetch_add(1, std::memory_order_relaxed); }
  // The id new_stream_id() hands out next; and making ids below `next` unused here: a
  // communicator rebuilt by shrink() gives its new engine the old one's counter, so that objects
  // carried over keep their ids and new ones get ids no carried object has.
  uint32_t next_stream_id() const { return next_stream_.load(std::memory_order_relaxed); }
  void reserve_stream_ids(uint32_t next) {
    next_stream_.store(std::max(next, next_stream_id()), std::memory_order_relaxed);
  }
  // The peers this rank knows to be gone (they left, were lost or were declared hung), in rank
  // order. Any thread (takes the driver token; after destroy(), reads what destroy() left).
  std::vector<int> gone_peers();
  // Any thread: attaches `handler` to `stream` (messages that arrived for it before are handed
  // over now) / detaches it (later messages of the stream are dropped; a peer that lent this
  // rank buffers for one of its operations is told `why` it never runs). Take the driver token.
  Status attach_stream(uint32_t stream, StreamHandler* handler);
  void detach_stream(uint32_t stream, std::string why);
  // Driver only, for handlers:
  // Starts an operation whose key the handler set; messages that arrived for it are replayed.
  void start_stream_op(std::shared_ptr<Op> op);
  // Fails an operation the handler started (nothing if it failed already).
  void fail_op(Op* op, const Status& status, TellPeers tell) { fail(op, status, tell); }
  // Sends a header-only message (queued while `peer` has no free slot).
  void send_header(int peer, const MsgHeader& h);
  // The same with a short text as payload (truncated to the slot).
  void send_text(int peer, const MsgHeader& h, std::string text);
  // Routes a message again (after its operation was started).
  void redispatch(InMessage* m) { dispatch(m); }
  void release(InMessage* m) { mailbox_->release(m); }
  // Releases a message of an operation that will never run here, first telling a peer that
  // lent this rank its buffers for it (a direct operation's step 0) that they are free, and
  // `why` the operation does not run.
  void refuse(InMessage* m, const MsgHeader& h, std::string_view why);
  // A stream's closed notice (kStreamClosed) from rank h.step, with its cause: sent down a
  // binomial tree rooted there (this rank's children in it), and relayed by every rank that
  // takes it in, whatever its own stream's state. Every rank hears once, after at most
  // ceil(log2 P) hops, and a rank's inbox takes such notices from at most log2 P senders
  // (its possible parents) instead of all P - 1, whose notices in a collective teardown touch a
  // control slot of every pair of ranks (1.8 GB at P = 512 in the simulation; P^2 x 4 KiB,
  // 64 GiB, at P = 4096).
  void send_stream_closed(const MsgHeader& h, std::string_view cause);
  // This rank's children in the binomial tree rooted at `origin` that relays a notice to every
  // rank (d + 2^i for every 2^i below the lowest set bit of d, d this rank's distance from the
  // origin): r + 2^i are data partners, so the relays need no other connections. A child that
  // is gone is replaced by its own children, so that its subtree still hears.
  std::vector<int> tree_children(int origin) const;
  // The next hop of a message relayed to `target` (a quorum's arrival at its coordinator): the
  // target itself when it is a data partner, else this rank's parent in the binomial tree rooted
  // at the target (d - 2^i, i the lowest set bit of d, d this rank's distance from it), a data
  // partner one step nearer. Relays thus connect only partners (issue 21).
  int toward(int target) const;

  // ProgressSource.
  int progress() override;
  void block(std::chrono::nanoseconds timeout) override;
  void wait_for_work(std::chrono::nanoseconds timeout) override;
  bool expecting() override { return !active_.empty(); }
  void interrupt() override;

 private:
  CommCore(int rank, int size, const Config& config);
  // Joins the world (Bootstrap), makes the transport, the mailbox and the small boxes, and
  // connects them to every peer.
  Status setup(Bootstrap& boot, bool in_process);
  // When a wait that starts now and lasts `timeout` (resolved) gives up.
  static Engine::Clock::time_point deadline(std::chrono::nanoseconds timeout);
  // Makes this rank's small boxes when the transport and EAGERCOMM_SMALL_MAX_BYTES allow.
  Status make_small_boxes();
  // Whether an active operation that uses the small boxes could advance now.
  bool small_news();
  // Signature probes (see the comment in comm_core.cc): sends one for every collective that has
  // waited kProbeAfter, and returns how long until the next one is due (max: none).
  std::chrono::nanoseconds send_due_probes();
  // Fails `op` if a probe that arrived before it began carried another signature.
  void check_early_probes(Op* op);
  void begin(Op* op);
  void activate(Op* op);
  void handle(const TransportCompletion& c, int* events);
  void on_mailbox_error(const MailboxEvent& ev);
  // Hands the mailbox's failed first-use imports to on_mailbox_error(); returns how many.
  int take_mailbox_failures();
  void dispatch(InMessage* m) { dispatch(m, read_header(*m)); }
  void dispatch(InMessage* m, const MsgHeader& h);
  void on_peer_exit(int peer, uint64_t from);
  // A leaver's exit that came down the exit tree from `peer` (kLeftRank, then kLeftFrom):
  // passed on to this rank's children, then taken in.
  void on_left_notice(int peer, uint32_t control);
  // Sends rank `leaver`'s exit (from collective `from` on) to this rank's children in the tree
  // rooted at the leaver: two control words each (no mailbox slot, so that a peer busy
  // elsewhere, or leaving too, still takes them).
  void send_exit_tree(int leaver, uint64_t from);
  // Whether a notice this rank sends every peer goes to `peer` directly: a data partner, or a
  // peer it has exchanged messages with (which may wait for its messages, or whose exit notice
  // must follow its last message in the per-pair order). The others hear along the partners.
  bool tells_directly(int peer) const { return partner_[peer] || mailbox_->talked_to(peer); }
  void on_control(int peer, uint32_t control);
  // `peer` takes part in no collective from sequence `from` on (0: none at all) nor in any
  // stream; operations that need it fail with kPeerFailed and `why`.
  void mark_gone(int peer, int64_t from, const Status& why);
  // `peer` was declared hung, by this rank's watchdog (`told_by` -1) or by the verdict rank
  // `told_by` passed on: it is gone from every collective, and the verdict goes on to this
  // rank's watched partners (but `told_by` and `peer`), so that it reaches the ranks that do not
  // watch it within the partner graph's diameter (liveness_watchdog.h).
  void on_hung(int peer, int told_by, const Status& why);

  // Fails `op` unless it is no longer active; with TellPeers::kYes, every other rank fails it
  // too with `status`'s message.
  // `stopped_peer` (if any) is known to have stopped using this rank's buffers already.
  void fail(Op* op, const Status& status, TellPeers tell, int stopped_peer = -1);
  // Whether `op` is still in flight (a copy of active_ can hold operations that failing an
  // earlier one ended).
  bool is_active(const Op* op) const {
    return std::find(active_.begin(), active_.end(), op) != active_.end();
  }
  void finish(Op* op);
  void retire(Op* op);
  int send_outgoing() { return notices_.send(*mailbox_, *transport_); }
  void complete_op(Op* op, const Status& status);
  // `peer` no longer uses the buffers of the draining operation `key` (of all, when empty).
  void release_lender(int peer, std::optional<OpKey> key);
  // destroy(): waits, bounded, for peers to stop using the buffers of operations failed there.
  void drain_lent_buffers();
  // One pass of progress while destroy() runs (the engine no longer drives): completions taken
  // in, deferred and queued sends retried. Returns how many completions it took.
  size_t closing_pass();
  // The collective sequence number whose low 24 bits a control notice carries.
  uint64_t widen_seq(uint32_t low24) const;

  const int rank_;
  const int size_;
  const Config config_;
  std::string transport_name_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Mailbox> mailbox_;
  std::unique_ptr<SmallBoxes> small_;
  // The earliest StreamHandler::next_due() after the last progress pass (steady clock, ns), for
  // the sleeps of the driver and of a progress thread that does not drive.
  std::atomic<int64_t> stream_due_ns_{
      std::chrono::steady_clock::time_point::max().time_since_epoch().count()};
  std::chrono::nanoseconds until_stream_due(std::chrono::nanoseconds timeout) const;
  std::atomic<int> small_active_{0};  // active operations that use small_ (any thread reads)
  uint32_t small_passes_ = 0;         // progress passes while only those were active
  std::unique_ptr<Engine> engine_;
  OpContext ctx_;

  // Application side.
  std::atomic<uint64_t> next_seq_{0};
  MpscQueue<Op> submissions_;
  std::atomic<bool> closing_{false};
  std::atomic<int> submitting_{0};  // submit() calls in progress, drained by destroy()

  // Engine side (current driver only).
  uint64_t begun_ = 0;               // every sequence below has begun
  std::map<uint64_t, Op*> waiting_;  // submitted out of order (several app threads)
  std::vector<Op*> active_;
  // Messages for operations not begun yet, in arrival order. A flat vector (few entries: at
  // most the peers' slots), so that the common case of a peer that is a bit ahead allocates
  // nothing once warm.
  std::vector<std::pair<OpKey, InMessage*>> unexpected_;
  std::vector<InMessage*> unexpected_scratch_;
  std::map<OpKey, Status> failed_early_;  // errors for operations not begun yet
  // Probes for collectives this rank had not begun when they came: (key, sender, signature).
  struct EarlyProbe {
    OpKey key;
    int peer;
    OpSignature sig;
  };
  std::vector<EarlyProbe> early_probes_;
  NoticeQueue notices_;
  GonePeers gone_;
  DrainingOps draining_;
  CoreStats stats_;
  std::atomic<bool> destroy_started_{false};
  std::mutex abort_mu_;                                         // orders racing abort()s
  std::string abort_reason_;                                    // under abort_mu_
  std::string closed_text_ = "the communicator was destroyed";  // written before closing_
  LivenessWatchdog watchdog_;
  std::vector<uint8_t> partner_;  // by rank: a data partner (data_partners()) of this rank
  std::vector<int> left_rank_;    // by sender: the leaver its last kLeftRank named (-1: none)

  std::atomic<uint32_t> next_stream_{1};
  std::map<uint32_t, StreamHandler*> streams_;
  std::map<uint32_t, std::vector<InMessage*>> stream_unexpected_;   // before attach
  std::vector<std::pair<uint32_t, std::string>> detached_streams_;  // and why they stopped
};

}  // namespace eagercomm::detail
