// Internal: the engine-side half of a Communicator. Not installed.
//
// Owns the transport endpoint, the mailbox and the engine; routes every arrived message to its
// operation by key after checking the signature; fails operations on every rank when one rank
// finds a problem; and implements ProgressSource for the engine.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collectives/op.h"
#include "collectives/small_boxes.h"
#include "collectives/stream_handler.h"
#include "runtime/config.h"
#include "runtime/engine.h"
#include "runtime/mpsc_queue.h"
#include "runtime/store.h"
#include "transport/mailbox.h"
#include "transport/transport.h"

namespace eagercomm::detail {

struct CoreStats {
  uint64_t ops_started = 0;
  uint64_t ops_failed = 0;
  uint64_t stale_messages = 0;
  uint64_t unexpected_messages = 0;
};

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

  // Numbers `op` in the collective stream and hands it to the engine. Any thread. Without
  // `kick`, a driver asleep is not woken (the caller is about to drive itself).
  void submit(std::shared_ptr<Op> op, bool kick = true);
  // submit(), then waits for the operation (EAGERCOMM_TIMEOUT), driving progress inline.
  Status run(std::shared_ptr<Op> op, bool kick = true);
  // run() for latency-bound calls: when the engine is free, this thread takes the token, numbers
  // and begins the operation itself (no submission queue, no wake-up) and drives it to the end.
  Status run_inline(std::shared_ptr<Op> op);
  // Registered transport memory for a runtime-owned buffer (zeroed). Any thread.
  Result<std::unique_ptr<MemoryRegion>> allocate(size_t bytes);

  // Fails every pending operation, tells the peers, releases the transport. Idempotent.
  void destroy();
  bool destroyed() const { return engine_->closed(); }

  MailboxStats mailbox_stats() const;
  CoreStats stats() const;

  // ---- Streams besides the collective stream (partial allreduce objects) ----
  // A new stream id (application thread; ranks that create their objects in the same order
  // get the same ids).
  uint32_t new_stream_id() { return next_stream_.fetch_add(1, std::memory_order_relaxed); }
  // Any thread: attaches `handler` to `stream` (messages that arrived for it before are handed
  // over now) / detaches it (later messages of the stream are dropped). Take the driver token.
  Status attach_stream(uint32_t stream, StreamHandler* handler);
  void detach_stream(uint32_t stream);
  // Driver only, for handlers:
  // Starts an operation whose key the handler set; messages that arrived for it are replayed.
  void start_stream_op(std::shared_ptr<Op> op);
  // Fails an operation the handler started (tell_peers: the peers fail it too).
  void fail_op(Op* op, const Status& status, bool tell_peers) { fail(op, status, tell_peers); }
  // Sends a header-only message (queued while `peer` has no free slot).
  void send_header(int peer, const MsgHeader& h);
  // Routes a message again (after its operation was started).
  void redispatch(InMessage* m) { dispatch(m); }
  void release(InMessage* m) { mailbox_->release(m); }

  // ProgressSource.
  int progress() override;
  void block(std::chrono::nanoseconds timeout) override;
  void wait_for_work(std::chrono::nanoseconds timeout) override;
  bool expecting() override { return !active_.empty(); }
  void interrupt() override;

 private:
  CommCore(int rank, int size, const Config& config);
  Status setup(Store& store, const std::string& scope, bool in_process);
  // Every rank announces its world size and waits for all others, before anything else
  // (transport selection included) depends on them: a rank that never comes or was started
  // with another world size is reported by name.
  Status join(Store& store, const std::string& scope);
  // Waits until `prefix`<r> is set for every rank r; fails early when a rank reported a
  // failure to join, and names the missing ranks at the timeout.
  Status wait_for_all(Store& store, const std::string& scope, const std::string& prefix);
  Status connect(Store& store, const std::string& scope);
  // When a wait that starts now gives up (EAGERCOMM_TIMEOUT), and the error it gives.
  Engine::Clock::time_point deadline() const;
  Status timed_out(const Op& op) const;
  // Makes this rank's small boxes when the transport and EAGERCOMM_SMALL_MAX_BYTES allow.
  Status make_small_boxes();
  // After every rank published: maps the peers' small boxes.
  Status connect_small_boxes(Store& store, const std::string& scope);
  // Whether an active operation that uses the small boxes could advance now.
  bool small_news();
  void begin(Op* op);
  void activate(Op* op);
  void handle(const TransportCompletion& c, int* events);
  void dispatch(InMessage* m);
  void on_peer_exit(int peer, uint32_t low_seq);
  // Fails `op`; with tell_peers, every other rank fails it too with `status`'s message.
  // `stopped_peer` (if any) is known to have stopped using this rank's buffers already.
  void fail(Op* op, const Status& status, bool tell_peers, int stopped_peer = -1);
  void finish(Op* op);
  void retire(Op* op);
  int send_outgoing();
  void complete_op(Op* op, const Status& status);
  // `peer` no longer uses the buffers of the draining operation `key` (of all, when empty).
  void release_lender(int peer, std::optional<OpKey> key);
  void drain_lent_buffers();
  uint64_t widen_seq(uint32_t low24) const;
  Status gone_status(uint64_t seq) const;

  const int rank_;
  const int size_;
  const Config config_;
  std::string transport_name_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Mailbox> mailbox_;
  std::unique_ptr<SmallBoxes> small_;
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
  std::vector<int64_t> gone_from_;        // per peer: first sequence it will never run (-1)
  // Header-only or short text messages waiting for a free slot at their peer.
  struct Outgoing {
    int peer;
    MsgHeader header;
    std::string text;
  };
  std::vector<Outgoing> outgoing_;
  // Failed operations whose buffers peers may still be using; they complete when those peers
  // confirm they stopped (or leave).
  struct Draining {
    Op* op;
    Status status;
    std::vector<int> pending;
  };
  std::map<OpKey, Draining> draining_;
  CoreStats stats_;
  std::atomic<uint32_t> next_stream_{1};
  std::map<uint32_t, StreamHandler*> streams_;
  std::map<uint32_t, std::vector<InMessage*>> stream_unexpected_;  // before attach
  std::vector<uint32_t> detached_streams_;
};

}  // namespace eagercomm::detail
