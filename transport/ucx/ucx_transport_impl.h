// The ucx backend's transport class, shared by its files (ucx_transport.h says what the backend
// does): setup and creation (ucx_transport.cc), connecting and peers' state (ucx_connect.cc),
// memory (ucx_memory.cc), the data path: write, notify, poll and the rings (ucx_data_path.cc),
// sleeping (ucx_wait.cc) and closing (ucx_close.cc). Private to transport/ucx/.
#pragma once

#include <ucp/api/ucp.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/unique_fd.h"
#include "transport/local_completions.h"
#include "transport/notify_ring/ring_block.h"
#include "transport/notify_ring/sleepers.h"
#include "transport/peer_liveness.h"
#include "transport/ucx/ucx_core.h"
#include "transport/ucx/ucx_transport.h"

namespace eagercomm::ucx {

// Our active message ids. UCP keeps user handlers in an array indexed by id: keep them small.
constexpr unsigned kNotifyAmId = 17;   // NoteHeader: a notification for poll()
constexpr unsigned kControlAmId = 18;  // NoteHeader with a Control kind in `tag`
// The close handshake (see ~UcxTransport): a closing rank sends kBye to every peer; a peer
// that is not closing answers kByeAck from its next poll(); one that is closing sent its own
// kBye, which serves as the answer.
// kWake: a peer pushed into our notification ring while we slept (see wait()).
// Connections are made on first use (issue 21): the rank that makes an endpoint sends kHello,
// and writes and notifications to that peer wait (kBusy) until it answered kHelloAck. So a peer
// knows every rank that may put into its memory before any put or notification lands there
// (stores through a mapping of its memory on one host land in memory that stays mapped), and its
// close handshake tells them all; a closing rank answers a hello with its kBye.
enum Control : uint32_t { kBye = 1, kByeAck = 2, kWake = 3, kHello = 4, kHelloAck = 5 };

// The notification region (UCP_MEM_MAP_ALLOCATE memory of the receiver): a ring block
// (transport/notify_ring/ring_block.h) whose header is this, then one ring per sender. Peers
// that can map it (ucp_rkey_ptr: UCX reaches us through shared memory) notify by pushing into
// their ring with plain stores; the rest use active messages.
struct NotifyBlock {
  notify_ring::Sleepers sleepers;  // threads of the receiver about to sleep in wait()
};
constexpr size_t kNotifyBlockBytes = 64;
static_assert(sizeof(NotifyBlock) == kNotifyBlockBytes);
// Threads that may sleep in wait() at the same time with their own wake-up fd; more still work
// but nap at most kUnarmedNap at a time.
constexpr int kWaitSlots = 4;
constexpr auto kUnarmedNap = std::chrono::milliseconds(1);
// A thread that is not the driver finds worker events that only the driver's progress clears:
// after the first report, wait() naps on its slot (wake() still ends the nap) from
// kBusyNapFirst, doubling up to kBusyNapMax, instead of returning in a tight loop.
constexpr auto kBusyNapFirst = std::chrono::milliseconds(1);
constexpr auto kBusyNapMax = std::chrono::milliseconds(32);
// Peers on this host are probed this often for a dead process (shared-memory endpoints run
// without UCX's peer-failure handling, so UCX would not notice); wait() sleeps no longer while
// such peers exist. Empty polls between two looks at the clock:
constexpr auto kLivenessInterval = std::chrono::milliseconds(100);
constexpr unsigned kIdlePollsPerClockRead = 64;

// The liveness beacon (peer_liveness.h) of the transport instance `instance` in job `job`:
// named like the job's shm segments, so the launcher's cleanup after a crash removes it.
std::string beacon_name(const std::string& job, uint64_t instance);
// poll() progresses the worker until it is idle or this many passes ran.
constexpr int kProgressPasses = 4;
// Polls served from the notification rings alone (delivering or not) between two progresses of
// the worker. A progress costs far more than a look at the rings (hundreds of ns: every UCX
// interface, a lock); progressing on every empty poll made a ring notification wait, on
// average, half a progress before the spinning receiver saw it. Traffic that needs the worker
// (active messages, emulated puts, wire-up) is served at most this many polls late, and at once
// after wait() saw worker events (progress_due_).
constexpr unsigned kRingPollsPerProgress = 8;

// What a notification carries: the active message header.
struct NoteHeader {
  int32_t sender;
  uint32_t tag;
};

class UcxTransport final : public Transport {
 public:
  UcxTransport(int rank, int size, const UcxTransportOptions& options,
               std::shared_ptr<UcxCore> core, std::string job, uint32_t ring_capacity)
      : Transport(rank, size),
        core_(std::move(core)),
        options_(options),
        peers_(size),
        op_count_(options.max_outstanding),
        ops_(std::make_shared<Op[]>(op_count_)),
        ring_capacity_(ring_capacity),
        consumers_(size) {
    job_ = std::move(job);
    free_ops_.reserve(op_count_);
    for (size_t i = op_count_; i-- > 0;) {
      ops_[i].owner = this;
      free_ops_.push_back(&ops_[i]);
    }
    for (int p = 0; p < size; ++p) {
      peers_[p].owner = this;
      peers_[p].rank = p;
    }
  }

  ~UcxTransport() override { close(); }
  void close() override;

  // The rest of the construction, which can fail.
  Status init();

  std::string_view name() const override { return "ucx"; }

  Result<std::unique_ptr<MemoryRegion>> allocate(size_t bytes, MemoryKind kind) override;
  Result<std::unique_ptr<MemoryRegion>> register_memory(void* data, size_t bytes,
                                                        MemoryKind kind) override;
  Result<std::unique_ptr<RemoteRegion>> import_region(int peer,
                                                      std::span<const uint8_t> key) override;
  std::vector<uint8_t> local_address() const override { return address_; }
  Status connect(int peer, std::span<const uint8_t> address) override;
  Status write(const MemoryRegion& local, size_t local_offset, const RemoteRegion& remote,
               size_t remote_offset, size_t bytes, uint32_t tag, uint64_t cookie) override;
  Status notify(int peer, uint32_t tag) override;
  void* mapped_address(const RemoteRegion& remote) override;
  size_t poll(std::span<TransportCompletion> out) override;
  void wait(std::chrono::nanoseconds timeout) override;
  void wake() override;
  bool peer_left(int peer) const override;
  TransportCaps capabilities() const override;
  uint32_t connected_peers() const override { return connected_peers_; }
  Status peer_error(int peer) const override;

 private:
  struct Peer {
    UcxTransport* owner = nullptr;  // for the endpoint's error callback
    int rank = -1;
    ucp_ep_h ep = nullptr;
    uint64_t instance = 0;
    std::vector<uint8_t> address;  // what connect() got, for idempotence
    bool failed = false;           // lost: kPeerError was queued, sends are refused
    std::string failed_why;        // what was seen first when `failed` was set (peer_error)
    bool ep_failed = false;        // UCX declared the endpoint unusable: close it with FORCE
    bool bye_received = false;     // the peer closed its transport: it sends and serves no more
    bool answered = false;         // during our close: the peer acknowledged our kBye
    bool handles_failure = false;  // endpoint in UCP_ERR_HANDLING_MODE_PEER
    int outstanding = 0;           // operations to this peer not complete yet
    LivenessWatch live;            // peers on this host: whether the process still exists
    // Set when the peer's notification region is mapped here: notifications are ring pushes.
    std::unique_ptr<RemoteRegion> notify_region;
    notify_ring::Producer ring;
    notify_ring::Sleepers* sleepers = nullptr;  // in the peer's NotifyBlock
    bool wake_due = false;                      // a kWake that met back-pressure
    bool hello_due = false;    // our endpoint is new: kHello still to send (back-pressure)
    bool hello_acked = false;  // the peer answered our kHello: writes may go
    bool knows_us = false;     // the peer made an endpoint to us (its kHello came)
    bool told = false;         // during our close: kBye went to it
  };
  // A write or notification whose UCX requests are not all complete. The AM header lives here
  // because UCP reads it until the send completes.
  struct Op {
    UcxTransport* owner = nullptr;
    NoteHeader header{};
    uint64_t cookie = 0;
    int peer = -1;
    int parts = 0;  // UCX requests outstanding (put, AM)
    void* put_request = nullptr;
    void* am_request = nullptr;
  };
  struct WaitSlot {
    UniqueFd fd;
    std::atomic<bool> busy{false};
  };

  Status check_peer(int peer, const char* what) const;
  Status send_control(int peer, Control kind);
  // Makes the endpoint to `peer` from the address connect() recorded, once (first use), and
  // says hello.
  Status open_ep(int peer);
  // open_ep(), then Ok once the peer answered the hello, kBusy before (writes wait for it).
  Status ready_to_send(int peer);
  // Sends the hellos, hello answers and wake-ups that met back-pressure; from poll().
  void send_due_controls();
  // Sends `answer` to the peers in `due` (last first), over an endpoint made for them if need
  // be; stops at back-pressure, leaving the rest for the next poll().
  void answer_due(std::vector<int>& due, Control answer);
  Status check_sendable(int peer, const char* what) const;
  Result<std::unique_ptr<MemoryRegion>> make_region(ucp_mem_h memh, void* data, size_t bytes,
                                                    MemoryKind kind);
  Op* take_op(int peer);
  void release_part(Op* op);
  Status send_note(Op* op, ucp_ep_h ep);
  void peer_failed(int peer, ucs_status_t status, const char* what);
  // Every kLivenessInterval: peers on this host whose process died are marked failed.
  void probe_peers();
  // Ring path: pushes `tag` into `peer`'s ring and wakes the peer if it sleeps.
  Status ring_notify(int peer, uint32_t tag);
  Status ring_room(int peer);             // kOk, kBusy when full, kProtocolError when corrupt
  void ring_push(Peer& p, uint32_t tag);  // after ring_room() said ok
  // Tags from the rings into `out`; returns how many.
  size_t drain_rings(std::span<TransportCompletion> out);
  bool rings_maybe_nonempty() const;
  // Waits (progressing the worker) until what was put to `peer` is complete at the target.
  Status flush_peer(int peer);
  int claim_wait_slot();
  void signal_slot(int i);

  static void on_put_done(void* request, ucs_status_t status, void* user_data);
  static void on_note_sent(void* request, ucs_status_t status, void* user_data);
  static ucs_status_t on_note(void* arg, const void* header, size_t header_length, void* data,
                              size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t on_control(void* arg, const void* header, size_t header_length, void* data,
                                 size_t length, const ucp_am_recv_param_t* param);
  static void on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status);

  std::shared_ptr<UcxCore> core_;  // first member: released last
  const UcxTransportOptions options_;
  uint64_t instance_ = 0;
  std::vector<uint8_t> address_;
  int worker_efd_ = -1;   // owned by the worker
  bool can_arm_ = false;  // the worker is thread-safe: wait() may arm it from any thread
  uint64_t host_ = 0;
  std::string job_;        // EAGERCOMM_JOB_ID: names the liveness beacon
  LivenessBeacon beacon_;  // held while this rank lives (peer_liveness.h)
  std::chrono::steady_clock::time_point next_probe_{};
  // Shared with wait() on other threads: some peer has a liveness watch; empty polls since
  // the last look at the clock.
  std::atomic<bool> watching_{false};
  std::atomic<unsigned> idle_polls_{0};
  bool shared_memory_ = true;        // the context has shared-memory transports
  bool closing_ = false;             // close() began: no goodbye answers, losses are expected
  bool closed_ = false;              // close() ended: nothing is sent or polled any more
  std::vector<Peer> peers_;          // never resized: endpoints' error callbacks point into it
  std::vector<int> acks_due_;        // peers whose kBye this rank answers from the next poll()
  std::vector<int> hello_acks_due_;  // peers whose kHello this rank answers from the next poll()
  uint32_t connected_peers_ = 0;     // endpoints made (open_ep)

  // Driver-only state (the engine serializes drivers; UCP runs our callbacks inside the
  // driver's ucp_worker_progress).
  const size_t op_count_;
  std::shared_ptr<Op[]> ops_;  // fixed: requests point into it
  std::vector<Op*> free_ops_;

  // Shared with wait()/wake() on other threads.
  // Completions of callbacks and ring writes, not yet polled (any() from wait()).
  LocalCompletions done_;
  std::atomic<bool> woken_{false};
  std::array<WaitSlot, kWaitSlots> slots_;

  // Notification rings (NotifyBlock): this rank's region, read by poll() (rings) and wait()
  // (sleepers, and maybe_nonempty() of the rings from any thread).
  const uint32_t ring_capacity_;
  std::unique_ptr<MemoryRegion> notify_region_;
  NotifyBlock* notify_block_ = nullptr;
  std::vector<notify_ring::Consumer> consumers_;
  // Senders whose ring poll() reads: every other rank, less those on another host (they cannot
  // map our memory) and those whose ring was found corrupt (driver only).
  std::vector<int> ring_senders_;
  bool any_wake_due_ = false;
  unsigned ring_polls_ = 0;  // polls answered from the rings alone since the worker progressed
  // Set by wait() when the worker has events (arm said busy, or the sleep ended): the next poll
  // progresses the worker.
  std::atomic<bool> progress_due_{false};
  // wait() reported worker events (arm said busy, or the event fd fired); poll() clears it
  // when it progresses the worker.
  std::atomic<bool> events_reported_{false};
  // The next nap of a waiter that comes back before anyone progressed the worker.
  std::atomic<int64_t> busy_nap_ns_{std::chrono::nanoseconds(kBusyNapFirst).count()};
};

}  // namespace eagercomm::ucx
