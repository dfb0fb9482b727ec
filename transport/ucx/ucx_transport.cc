#include "transport/ucx/ucx_transport.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <time.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "runtime/gpu.h"
#include "runtime/unique_fd.h"
#include "transport/local_completions.h"
#include "transport/peer_liveness.h"
#include "transport/shm/shm_ring.h"
#include "transport/shm/shm_segment.h"
#include "transport/shm/shm_transport.h"
#include "transport/transport_log.h"
#include "transport/ucx/ucx_wire.h"
#include "transport/write_bounds.h"

namespace eagercomm {
namespace {

// Our active message ids. UCP keeps user handlers in an array indexed by id: keep them small.
constexpr unsigned kNotifyAmId = 17;   // NoteHeader: a notification for poll()
constexpr unsigned kControlAmId = 18;  // NoteHeader with a Control kind in `tag`
// The close handshake (see ~UcxTransport): a closing rank sends kBye to every peer; a peer
// that is not closing answers kByeAck from its next poll(); one that is closing sent its own
// kBye, which serves as the answer.
// kWake: a peer pushed into our notification ring while we slept (see wait()).
enum Control : uint32_t { kBye = 1, kByeAck = 2, kWake = 3 };

// The notification region (UCP_MEM_MAP_ALLOCATE memory of the receiver): this block, then one
// shm_ring per sender. Peers that can map it (ucp_rkey_ptr: UCX reaches us through shared
// memory) notify by pushing into their ring with plain stores; the rest use active messages.
struct NotifyBlock {
  alignas(64) std::atomic<uint32_t> sleepers;  // threads of the receiver about to sleep in wait()
};
constexpr size_t kNotifyBlockBytes = 64;
static_assert(sizeof(NotifyBlock) == kNotifyBlockBytes);
size_t notify_ring_offset(int sender, uint32_t capacity) {
  return kNotifyBlockBytes + static_cast<size_t>(sender) * shm_ring::ring_bytes(capacity);
}
// Threads that may sleep in wait() at the same time with their own wake-up fd; more still work
// but nap at most kUnarmedNap at a time.
constexpr int kWaitSlots = 4;
constexpr auto kUnarmedNap = std::chrono::milliseconds(1);
// Peers on this host are probed this often for a dead process (shared-memory endpoints run
// without UCX's peer-failure handling, so UCX would not notice); wait() sleeps no longer while
// such peers exist. Empty polls between two looks at the clock:
constexpr auto kLivenessInterval = std::chrono::milliseconds(100);
constexpr unsigned kIdlePollsPerClockRead = 64;

// The liveness beacon (peer_liveness.h) of the transport instance `instance` in job `job`:
// named like the job's shm segments, so the launcher's cleanup after a crash removes it.
std::string beacon_name(const std::string& job, uint64_t instance) {
  char hex[20];
  snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(instance));
  const std::string j = shm_sanitize_job_id(job);
  return "/eagercomm-" + (j.empty() ? std::string("nojob") : j) + "-ucx-" + hex + "-live";
}
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

// The address and remote-key formats (headers, checks, encoders): transport/ucx/ucx_wire.h.

uint64_t fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

// Memory ordering between plain stores into mapped peer memory and the notification that
// publishes them (and between the notification and the loads on the other side). UCX's own
// send and receive paths fence too; these keep the compiler and weakly ordered CPUs honest on
// our side of the call. gcc's TSan rejects atomic_thread_fence, and cannot see other
// processes' accesses anyway.
inline void fence(std::memory_order order) {
#if defined(__SANITIZE_THREAD__)
  (void)order;
  std::atomic_signal_fence(std::memory_order_seq_cst);
#else
  std::atomic_thread_fence(order);
#endif
}

// Same value for processes that may share memory: same kernel boot and IPC namespace.
uint64_t host_identity() {
  std::string id;
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::getline(boot, id);
  char ns[128] = {0};
  const ssize_t n = readlink("/proc/self/ns/ipc", ns, sizeof(ns) - 1);
  if (n > 0) id.append(ns, static_cast<size_t>(n));
  if (id.empty()) {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    id = host;
  }
  return fnv1a(reinterpret_cast<const uint8_t*>(id.data()), id.size());
}

// True when the context may reach peers through shared memory (or when we cannot tell).
// UCP has no query for the transports in use, so this reads ucp_context_print_info's resource
// lines ("#   resource 3  :  md 2  dev 0  flags -- sysv/memory").
bool context_has_shared_memory(ucp_context_h context) {
  char* text = nullptr;
  size_t length = 0;
  FILE* f = open_memstream(&text, &length);
  if (f == nullptr) return true;
  ucp_context_print_info(context, f);
  fclose(f);
  std::unique_ptr<char, decltype(&free)> owned(text, &free);
  std::istringstream lines(std::string(text ? text : "", length));
  bool any = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("resource") == std::string::npos) continue;
    const size_t dashes = line.rfind("-- ");
    if (dashes == std::string::npos) continue;
    any = true;
    const std::string tl = line.substr(dashes + 3, line.find('/', dashes) - dashes - 3);
    if (tl == "posix" || tl == "sysv" || tl == "xpmem" || tl == "cma" || tl == "knem") return true;
  }
  return !any;
}

// The single place that maps eagercomm memory kinds to UCX memory types: CUDA memory goes to UCX
// as UCS_MEMORY_TYPE_CUDA when this UCX build handles it (ucx_memory_kind_supported()).
Result<ucs_memory_type_t> memory_type_of(MemoryKind kind, bool ucx_has_cuda) {
  EC_RETURN_IF_ERROR(ucx_memory_kind_supported(kind, ucx_has_cuda));
  return kind == MemoryKind::kCuda ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
}

StatusCode code_of(ucs_status_t s) {
  switch (s) {
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_EXCEEDS_LIMIT:
      return StatusCode::kNoMemory;
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
      return StatusCode::kPeerFailed;
    case UCS_ERR_NO_DEVICE:
    case UCS_ERR_NO_ELEM:
      return StatusCode::kUnavailable;
    case UCS_ERR_UNSUPPORTED:
      return StatusCode::kNotSupported;
    case UCS_ERR_INVALID_PARAM:
      return StatusCode::kInvalidArgument;
    case UCS_ERR_NO_RESOURCE:
      return StatusCode::kBusy;
    default:
      return StatusCode::kIoError;
  }
}

// Logs a UCX failure where it is first seen and builds the Status callers propagate.
Status ucx_failure(ucs_status_t s, const std::string& what) {
  EC_ERROR(kNet, "ucx: %s: %s", what.c_str(), ucs_status_string(s));
  return make_status(code_of(s), "ucx: %s: %s", what.c_str(), ucs_status_string(s));
}

std::string tls_hint() {
  const char* tls = getenv("UCX_TLS");
  return std::string("UCX_TLS=") + (tls ? tls : "(unset)");
}

// The UCP context and worker. Shared by the transport, its regions and imported remotes:
// ucp_mem_unmap needs the context and ucp_rkey_destroy returns the key to the worker's pool,
// so both live until the last of them is gone.
struct UcxCore {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  bool cuda_memory = false;  // this UCX build handles UCS_MEMORY_TYPE_CUDA (ucp_context_query)
  // Memory UCX may still read after the transport released the requests using it (AM headers
  // of operations abandoned at a timed-out close); freed after the worker.
  std::vector<std::shared_ptr<void>> orphans;
  UcxCore() = default;
  UcxCore(const UcxCore&) = delete;
  UcxCore& operator=(const UcxCore&) = delete;
  ~UcxCore() {
    if (worker) ucp_worker_destroy(worker);
    if (context) ucp_cleanup(context);
  }
};

class UcxRegion final : public MemoryRegion {
 public:
  UcxRegion(std::shared_ptr<UcxCore> core, ucp_mem_h memh, void* data, size_t size, MemoryKind kind)
      : MemoryRegion(data, size, kind), core_(std::move(core)), memh_(memh) {}
  ~UcxRegion() override {
    const ucs_status_t s = ucp_mem_unmap(core_->context, memh_);
    if (s != UCS_OK)
      EC_WARN(kMem, "ucx: unmapping a region of %zu bytes failed: %s", size_, ucs_status_string(s));
  }
  const UcxCore* core() const { return core_.get(); }
  ucp_mem_h memh() const { return memh_; }
  void set_remote_key(std::vector<uint8_t> key) { remote_key_ = std::move(key); }

 private:
  std::shared_ptr<UcxCore> core_;
  ucp_mem_h memh_;
};

// memcpy for the few bytes of a latency-bound write without a call (memcpy's dispatch costs
// more than the copy there); larger copies go to memcpy.
inline void copy_small(uint8_t* to, const uint8_t* from, size_t n) {
  if (n >= 8 && n <= 16) {  // two words, overlapping unless n == 16
    uint64_t a, b;
    std::memcpy(&a, from, 8);
    std::memcpy(&b, from + n - 8, 8);
    std::memcpy(to, &a, 8);
    std::memcpy(to + n - 8, &b, 8);
  } else {
    std::memcpy(to, from, n);
  }
}

class UcxRemote final : public RemoteRegion {
 public:
  UcxRemote(std::shared_ptr<UcxCore> core, int peer, size_t size, ucp_rkey_h rkey, uint64_t base,
            void* mapped)
      : RemoteRegion(peer, size),
        core_(std::move(core)),
        rkey_(rkey),
        base_(base),
        mapped_(mapped) {}
  ~UcxRemote() override { ucp_rkey_destroy(rkey_); }
  const UcxCore* core() const { return core_.get(); }
  ucp_rkey_h rkey() const { return rkey_; }
  uint64_t base() const { return base_; }
  void* mapped() const { return mapped_; }

 private:
  std::shared_ptr<UcxCore> core_;
  ucp_rkey_h rkey_;
  uint64_t base_;
  void* mapped_;  // ucp_rkey_ptr's pointer when the peer's memory is mapped here, else nullptr
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
    shm_ring::Producer ring;
    std::atomic<uint32_t>* sleepers = nullptr;  // the peer's NotifyBlock::sleepers
    bool wake_due = false;                      // a kWake that met back-pressure
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
  bool shared_memory_ = true;  // the context has shared-memory transports
  bool closing_ = false;       // close() began: no goodbye answers, losses are expected
  bool closed_ = false;        // close() ended: nothing is sent or polled any more
  std::vector<Peer> peers_;    // never resized: endpoints' error callbacks point into it
  std::vector<int> acks_due_;  // peers whose kBye this rank answers from the next poll()

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
  std::vector<shm_ring::Consumer> consumers_;
  // Senders whose ring poll() reads: every other rank, less those on another host (they cannot
  // map our memory) and those whose ring was found corrupt (driver only).
  std::vector<int> ring_senders_;
  bool any_wake_due_ = false;
  unsigned ring_polls_ = 0;  // polls answered from the rings alone since the worker progressed
  // Set by wait() when the worker has events (arm said busy, or the sleep ended): the next poll
  // progresses the worker.
  std::atomic<bool> progress_due_{false};
};

Status UcxTransport::init() {
  std::random_device rd;
  instance_ = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
              static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());

  ucp_worker_attr_t attr{};
  attr.field_mask = UCP_WORKER_ATTR_FIELD_THREAD_MODE;
  ucs_status_t s = ucp_worker_query(core_->worker, &attr);
  if (s != UCS_OK) return ucx_failure(s, "querying the worker");
  can_arm_ = attr.thread_mode == UCS_THREAD_MODE_MULTI;
  if (!can_arm_) {
    EC_WARN(kNet,
            "ucx: rank %d: the worker is not thread-safe (UCX built without multi-thread "
            "support?): wait() naps %lld ms at a time instead of sleeping on the event fd",
            rank(), static_cast<long long>(kUnarmedNap.count()));
  }

  ucp_am_handler_param_t hp{};
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                  UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  hp.id = kNotifyAmId;
  hp.flags = UCP_AM_FLAG_WHOLE_MSG;
  hp.cb = &UcxTransport::on_note;
  hp.arg = this;
  s = ucp_worker_set_am_recv_handler(core_->worker, &hp);
  if (s != UCS_OK) return ucx_failure(s, "setting the notification handler");
  hp.id = kControlAmId;
  hp.cb = &UcxTransport::on_control;
  s = ucp_worker_set_am_recv_handler(core_->worker, &hp);
  if (s != UCS_OK) return ucx_failure(s, "setting the control handler");
  host_ = host_identity();
  shared_memory_ = context_has_shared_memory(core_->context);
  // Without a beacon peers on this host cannot tell our death from slowness: worth a warning,
  // not a failure.
  Result<LivenessBeacon> beacon = LivenessBeacon::create(beacon_name(job_, instance_));
  if (beacon.ok()) {
    beacon_ = std::move(beacon.value());
  } else {
    EC_WARN(kNet, "ucx: rank %d: %s; peers on this host will not detect this rank's death", rank(),
            beacon.status().message().c_str());
  }

  s = ucp_worker_get_efd(core_->worker, &worker_efd_);
  if (s != UCS_OK) return ucx_failure(s, "getting the worker's event fd");

  ucp_address_t* worker_address = nullptr;
  size_t worker_bytes = 0;
  s = ucp_worker_get_address(core_->worker, &worker_address, &worker_bytes);
  if (s != UCS_OK) return ucx_failure(s, "getting the worker address");
  const auto* wa = reinterpret_cast<const uint8_t*>(worker_address);
  std::vector<uint8_t> body(wa, wa + worker_bytes);
  ucp_worker_release_address(core_->worker, worker_address);

  // The notification region: its key travels in the address, so peers map it at connect().
  Result<std::unique_ptr<MemoryRegion>> region =
      allocate(notify_ring_offset(size(), ring_capacity_), MemoryKind::kHost);
  if (!region.ok()) return region.status();
  notify_region_ = std::move(region.value());
  auto* base = static_cast<uint8_t*>(notify_region_->data());
  notify_block_ = std::construct_at(reinterpret_cast<NotifyBlock*>(base));
  for (int sender = 0; sender < size(); ++sender) {
    shm_ring::init(base + notify_ring_offset(sender, ring_capacity_), ring_capacity_);
    consumers_[sender] =
        shm_ring::Consumer(base + notify_ring_offset(sender, ring_capacity_), ring_capacity_);
  }
  for (int sender = 0; sender < size(); ++sender) {
    if (sender != rank()) ring_senders_.push_back(sender);
  }
  UcxAddressHeader h{};
  h.rank = rank();
  h.instance = instance_;
  h.host = host_;
  h.ring_capacity = ring_capacity_;
  address_ = ucx_encode_address(h, body, notify_region_->remote_key());

  for (WaitSlot& slot : slots_) {
    const int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (fd < 0) {
      EC_ERROR(kNet, "ucx: eventfd for wake-ups failed: %m");
      return make_status(StatusCode::kIoError, "ucx: eventfd for wake-ups failed: %s",
                         strerror(errno));
    }
    slot.fd = UniqueFd(fd);
  }
  EC_INFO(kNet, "ucx: rank %d of %d: worker ready (address %zu bytes, %s, %zu requests max)",
          rank(), size(), worker_bytes, tls_hint().c_str(), op_count_);
  return Status::Ok();
}

// Closing, bounded by close_timeout in all:
//  1. The close handshake: kBye to every peer still there, then progress until each answered
//     (kByeAck, or its own kBye when it is closing too). A peer that got our kBye refuses to
//     send to us, so nothing it does later runs into a closed endpoint. That matters beyond
//     tidiness: where UCX emulates puts with messages (TCP), the target answers every put, and
//     with UCP_ERR_HANDLING_MODE_NONE UCX 1.13 aborts the process when such an answer meets a
//     closed connection. A peer that was told also treats our connection loss as expected.
//  2. Endpoints close with a flush: outstanding puts and notifications complete first (their
//     callbacks still run, into this object); failed endpoints close with FORCE.
//  3. Whatever is left when time is up is released without callbacks, and the worker, which
//     regions may keep alive, stops calling into this object.
void UcxTransport::close() {
  if (closing_) return;
  ucp_worker_h worker = core_->worker;
  closing_ = true;
  beacon_.reset();  // peers on this host see a departure, not a death
  const auto deadline = std::chrono::steady_clock::now() + options_.close_timeout;
  auto expired = [&] { return std::chrono::steady_clock::now() >= deadline; };
  auto progress = [&] {
    if (ucp_worker_progress(worker) == 0) sched_yield();
  };

  std::vector<int> told;
  for (Peer& p : peers_) {
    if (!p.ep || p.failed || p.bye_received) continue;
    Status s;
    while ((s = send_control(p.rank, kBye)).code() == StatusCode::kBusy && !expired()) progress();
    if (s.ok()) told.push_back(p.rank);
  }
  auto all_answered = [&] {
    for (int r : told) {
      const Peer& p = peers_[r];
      if (!p.answered && !p.bye_received && !p.failed) return false;
    }
    return true;
  };
  while (!all_answered() && !expired()) progress();
  size_t silent = 0;
  for (int r : told) silent += !peers_[r].answered && !peers_[r].bye_received && !peers_[r].failed;

  std::vector<void*> closing;
  for (Peer& p : peers_) {
    if (!p.ep) continue;
    // A flush close in peer-failure mode waits for the peer's progress. FORCE is allowed in
    // that mode (both sides use it) and loses nothing once the peer answered our goodbye with
    // nothing of ours in flight: it had served everything we sent before.
    const bool settled = (p.answered || p.bye_received) && p.outstanding == 0;
    ucp_request_param_t param{};
    if (p.ep_failed || (p.handles_failure && settled)) {
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    }
    ucs_status_ptr_t r = ucp_ep_close_nbx(p.ep, &param);
    if (UCS_PTR_IS_ERR(r)) {
      EC_DEBUG(kNet, "ucx: rank %d: closing the endpoint to rank %d: %s", rank(), p.rank,
               ucs_status_string(UCS_PTR_STATUS(r)));
    } else if (r != nullptr) {
      closing.push_back(r);
    }
    p.ep = nullptr;
  }
  for (;;) {
    closing.erase(std::remove_if(closing.begin(), closing.end(),
                                 [](void* r) {
                                   if (ucp_request_check_status(r) == UCS_INPROGRESS) return false;
                                   ucp_request_free(r);
                                   return true;
                                 }),
                  closing.end());
    if (closing.empty() && free_ops_.size() == op_count_) break;
    if (expired()) break;
    progress();
  }
  if (silent > 0 || !closing.empty() || free_ops_.size() != op_count_) {
    EC_WARN(kNet,
            "ucx: rank %d: closing took longer than %lld ms (%zu peers did not answer, %zu "
            "endpoints and %zu operations unfinished); releasing them",
            rank(), static_cast<long long>(options_.close_timeout.count()), silent, closing.size(),
            op_count_ - free_ops_.size());
  }
  // No callback may run into this object any more.
  for (void* r : closing) ucp_request_free(r);
  bool abandoned = false;
  for (size_t i = 0; i < op_count_; ++i) {
    Op& op = ops_[i];
    if (op.put_request) ucp_request_free(op.put_request);
    if (op.am_request) ucp_request_free(op.am_request);
    abandoned |= op.put_request != nullptr || op.am_request != nullptr;
    op.put_request = op.am_request = nullptr;
  }
  if (abandoned) core_->orphans.push_back(ops_);
  for (unsigned id : {kNotifyAmId, kControlAmId}) {
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = id;
    hp.cb = nullptr;
    hp.arg = nullptr;
    (void)ucp_worker_set_am_recv_handler(worker, &hp);
  }
  closed_ = true;
}

Status UcxTransport::check_peer(int peer, const char* what) const {
  if (peer >= 0 && peer < size()) return Status::Ok();
  return make_status(StatusCode::kInvalidArgument, "ucx: %s: peer rank %d out of range [0, %d)",
                     what, peer, size());
}

Status UcxTransport::check_sendable(int peer, const char* what) const {
  EC_RETURN_IF_ERROR(check_peer(peer, what));
  const Peer& p = peers_[peer];
  if (closed_) {
    return make_status(StatusCode::kAborted, "ucx: %s: this transport was closed", what);
  }
  if (!p.ep) {
    return make_status(StatusCode::kInvalidArgument,
                       "ucx: %s: rank %d is not connected (connect() it first)", what, peer);
  }
  if (p.bye_received) {
    return make_status(StatusCode::kPeerFailed, "ucx: %s: rank %d has closed its transport", what,
                       peer);
  }
  if (p.failed) {
    return make_status(StatusCode::kPeerFailed, "ucx: %s: the connection to rank %d failed", what,
                       peer);
  }
  return Status::Ok();
}

Result<std::unique_ptr<MemoryRegion>> UcxTransport::make_region(ucp_mem_h memh, void* data,
                                                                size_t bytes, MemoryKind kind) {
  // The region owns memh from here on: an error below unmaps it.
  auto region = std::make_unique<UcxRegion>(core_, memh, data, bytes, kind);
  void* packed = nullptr;
  size_t packed_bytes = 0;
  const ucs_status_t s = ucp_rkey_pack(core_->context, memh, &packed, &packed_bytes);
  if (s != UCS_OK) return ucx_failure(s, "packing the remote key of a region");
  UcxKeyHeader h{};
  h.kind = static_cast<uint8_t>(kind);
  h.owner = rank();
  h.instance = instance_;
  h.base = reinterpret_cast<uint64_t>(data);
  h.size = bytes;
  std::vector<uint8_t> key =
      ucx_encode_key(h, std::span(static_cast<const uint8_t*>(packed), packed_bytes));
  ucp_rkey_buffer_release(packed);
  region->set_remote_key(std::move(key));
  return std::unique_ptr<MemoryRegion>(std::move(region));
}

Result<std::unique_ptr<MemoryRegion>> UcxTransport::allocate(size_t bytes, MemoryKind kind) {
  EC_ASSIGN_OR_RETURN(const ucs_memory_type_t type, memory_type_of(kind, core_->cuda_memory));
  if (bytes == 0) {
    return make_status(StatusCode::kInvalidArgument, "ucx: allocate: 0 bytes requested");
  }
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS |
                  UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
  mp.length = bytes;
  mp.flags = UCP_MEM_MAP_ALLOCATE;
  mp.memory_type = type;
  ucp_mem_h memh = nullptr;
  ucs_status_t s = ucp_mem_map(core_->context, &mp, &memh);
  if (s != UCS_OK) {
    return ucx_failure(s, "allocating " + std::to_string(bytes) + " bytes of mapped memory");
  }
  ucp_mem_attr_t ma{};
  ma.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
  s = ucp_mem_query(memh, &ma);
  if (s != UCS_OK || ma.address == nullptr || ma.length < bytes) {
    (void)ucp_mem_unmap(core_->context, memh);
    return ucx_failure(s != UCS_OK ? s : UCS_ERR_NO_MEMORY, "querying allocated memory");
  }
  // UCX may take it from a heap or a recycled segment; the contract says zero-filled.
  if (kind == MemoryKind::kCuda) {
    if (const Status z = gpu::zero(ma.address, bytes); !z.ok()) {
      (void)ucp_mem_unmap(core_->context, memh);
      return z;
    }
  } else {
    std::memset(ma.address, 0, bytes);
  }
  return make_region(memh, ma.address, bytes, kind);
}

Result<std::unique_ptr<MemoryRegion>> UcxTransport::register_memory(void* data, size_t bytes,
                                                                    MemoryKind kind) {
  EC_ASSIGN_OR_RETURN(const ucs_memory_type_t type, memory_type_of(kind, core_->cuda_memory));
  if (data == nullptr || bytes == 0) {
    return make_status(StatusCode::kInvalidArgument,
                       "ucx: register_memory: %s (pointer %p, %zu bytes)",
                       data == nullptr ? "null pointer" : "empty range", data, bytes);
  }
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                  UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
  mp.address = data;
  mp.length = bytes;
  mp.memory_type = type;
  ucp_mem_h memh = nullptr;
  const ucs_status_t s = ucp_mem_map(core_->context, &mp, &memh);
  if (s != UCS_OK) return ucx_failure(s, "registering " + std::to_string(bytes) + " bytes");
  return make_region(memh, data, bytes, kind);
}

Result<std::unique_ptr<RemoteRegion>> UcxTransport::import_region(int peer,
                                                                  std::span<const uint8_t> key) {
  EC_RETURN_IF_ERROR(check_peer(peer, "import_region"));
  const Peer& p = peers_[peer];
  if (!p.ep) {
    return make_status(StatusCode::kInvalidArgument,
                       "ucx: import_region: rank %d is not connected (connect() it first)", peer);
  }
  EC_ASSIGN_OR_RETURN(const UcxKey decoded, ucx_decode_key(key, peer, p.instance));
  const UcxKeyHeader& h = decoded.header;
  EC_RETURN_IF_ERROR(memory_type_of(static_cast<MemoryKind>(h.kind), core_->cuda_memory).status());
  ucp_rkey_h rkey = nullptr;
  const ucs_status_t s = ucp_ep_rkey_unpack(p.ep, decoded.packed_rkey.data(), &rkey);
  if (s != UCS_OK) {
    return ucx_failure(s, "unpacking the remote key from rank " + std::to_string(peer));
  }
  // GPU memory is never handed out as a mapped pointer: host stores cannot reach it.
  void* mapped = nullptr;
  if (h.kind != static_cast<uint8_t>(MemoryKind::kHost) ||
      ucp_rkey_ptr(rkey, h.base, &mapped) != UCS_OK) {
    mapped = nullptr;
  }
  EC_DEBUG(kNet, "ucx: rank %d imported %zu bytes of rank %d (%s)", rank(),
           static_cast<size_t>(h.size), peer, mapped ? "mapped here" : "reached by puts");
  return std::unique_ptr<RemoteRegion>(
      std::make_unique<UcxRemote>(core_, peer, h.size, rkey, h.base, mapped));
}

Status UcxTransport::connect(int peer, std::span<const uint8_t> address) {
  EC_RETURN_IF_ERROR(check_peer(peer, "connect"));
  EC_ASSIGN_OR_RETURN(const UcxAddress decoded, ucx_decode_address(address, peer));
  const UcxAddressHeader& h = decoded.header;
  const uint8_t* worker_address = decoded.worker_address.data();
  Peer& p = peers_[peer];
  if (p.ep) {
    if (std::equal(address.begin(), address.end(), p.address.begin(), p.address.end())) {
      return Status::Ok();
    }
    return make_status(StatusCode::kInvalidArgument,
                       "ucx: connect: rank %d is already connected with a different address", peer);
  }
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.address = reinterpret_cast<const ucp_address_t*>(worker_address);
  // Peer-failure handling wherever shared memory cannot be used: UCX 1.13's shared-memory
  // transports do not support it, so asking for it on one host would silently move the pair
  // to TCP. Both sides of a pair compute the same answer from the same facts.
  const bool same_host = h.host == host_;
  ep.err_mode =
      same_host && shared_memory_ ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = &UcxTransport::on_ep_error;
  ep.err_handler.arg = &p;
  const ucs_status_t s = ucp_ep_create(core_->worker, &ep, &p.ep);
  if (s != UCS_OK) {
    p.ep = nullptr;
    return ucx_failure(s, "rank " + std::to_string(rank()) + " cannot reach rank " +
                              std::to_string(peer) + " (" + tls_hint() + ")");
  }
  p.instance = h.instance;
  p.address.assign(address.begin(), address.end());
  // Notifications: ring pushes where the peer's region maps here, active messages elsewhere.
  Result<std::unique_ptr<RemoteRegion>> ring_region = import_region(peer, decoded.notify_key);
  if (!ring_region.ok()) {
    Status e = ring_region.status();
    e.prepend("ucx: the notification region in rank " + std::to_string(peer) + "'s address: ");
    return e;
  }
  if (auto* mapped = static_cast<uint8_t*>(mapped_address(*ring_region.value()));
      mapped != nullptr && peer != rank()) {
    if (ring_region.value()->size() < notify_ring_offset(size(), h.ring_capacity)) {
      return make_status(StatusCode::kProtocolError,
                         "ucx: rank %d's notification region has %zu bytes, too few for %d rings "
                         "of %u entries",
                         peer, ring_region.value()->size(), size(), h.ring_capacity);
    }
    p.ring =
        shm_ring::Producer(mapped + notify_ring_offset(rank(), h.ring_capacity), h.ring_capacity);
    p.sleepers = &reinterpret_cast<NotifyBlock*>(mapped)->sleepers;
  }
  p.notify_region = std::move(ring_region.value());
  if (!same_host) std::erase(ring_senders_, peer);
  if (same_host) {
    Result<LivenessWatch> live = LivenessWatch::open(beacon_name(job_, h.instance));
    if (live.ok()) {
      p.live = std::move(live.value());
      watching_.store(true, std::memory_order_relaxed);
    } else {
      EC_DEBUG(kNet, "ucx: rank %d: no liveness beacon of rank %d: %s", rank(), peer,
               live.status().message().c_str());
    }
  }
  p.handles_failure = ep.err_mode == UCP_ERR_HANDLING_MODE_PEER;
  EC_DEBUG(kNet,
           "ucx: rank %d connecting to rank %d (%s host, peer failures %s, notifications "
           "by %s)",
           rank(), peer, same_host ? "same" : "another",
           ep.err_mode == UCP_ERR_HANDLING_MODE_PEER ? "handled" : "not handled",
           p.ring.attached() ? "ring stores" : "active messages");
  return Status::Ok();
}

UcxTransport::Op* UcxTransport::take_op(int peer) {
  if (free_ops_.empty()) return nullptr;
  Op* op = free_ops_.back();
  free_ops_.pop_back();
  op->peer = peer;
  ++peers_[peer].outstanding;
  return op;
}

void UcxTransport::release_part(Op* op) {
  if (--op->parts > 0) return;
  --peers_[op->peer].outstanding;
  free_ops_.push_back(op);
}

void UcxTransport::peer_failed(int peer, ucs_status_t status, const char* what) {
  Peer& p = peers_[peer];
  if (p.failed) return;
  p.failed = true;
  p.failed_why = std::string("ucx: ") + what + " failed: " + ucs_status_string(status);
  EC_ERROR(kNet, "ucx: rank %d: %s to rank %d failed: %s; the peer is treated as lost", rank(),
           what, peer, ucs_status_string(status));
  done_.push(TransportCompletion::Kind::kPeerError, peer, 0, 0);
}

void UcxTransport::probe_peers() {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_probe_) return;
  next_probe_ = now + kLivenessInterval;
  for (Peer& p : peers_) {
    if (!p.live.valid() || p.failed || p.bye_received || !p.ep) continue;
    if (p.live.check() != LivenessWatch::State::kDead) continue;
    p.live.reap();  // nothing left in /dev/shm, launcher or not
    p.failed = true;
    p.failed_why = "ucx: rank " + std::to_string(p.rank) + "'s process is gone (killed or crashed)";
    EC_ERROR(kNet, "ucx: rank %d: rank %d's process is gone (killed or crashed)", rank(), p.rank);
    done_.push(TransportCompletion::Kind::kPeerError, p.rank, 0, 0);
  }
}

void UcxTransport::on_put_done(void* request, ucs_status_t status, void* user_data) {
  Op* op = static_cast<Op*>(user_data);
  UcxTransport* self = op->owner;
  ucp_request_free(request);
  op->put_request = nullptr;
  if (status != UCS_OK) self->peer_failed(op->peer, status, "a put");
  // Failed or not, UCX is done with the source.
  self->done_.push(TransportCompletion::Kind::kWriteDone, op->peer, op->header.tag, op->cookie);
  self->release_part(op);
}

void UcxTransport::on_note_sent(void* request, ucs_status_t status, void* user_data) {
  Op* op = static_cast<Op*>(user_data);
  UcxTransport* self = op->owner;
  ucp_request_free(request);
  op->am_request = nullptr;
  if (status != UCS_OK) self->peer_failed(op->peer, status, "a notification");
  self->release_part(op);
}

// Runs inside the driver's ucp_worker_progress(), in arrival order.
ucs_status_t UcxTransport::on_note(void* arg, const void* header, size_t header_length, void* data,
                                   size_t length, const ucp_am_recv_param_t* param) {
  (void)data;
  (void)param;
  auto* self = static_cast<UcxTransport*>(arg);
  if (self == nullptr) return UCS_OK;  // after teardown
  NoteHeader h;
  if (header_length != sizeof(h) || length != 0) {
    EC_ERROR(kNet,
             "ucx: rank %d: dropped a malformed notification (%zu header bytes, %zu data "
             "bytes)",
             self->rank(), header_length, length);
    return UCS_OK;
  }
  std::memcpy(&h, header, sizeof(h));
  if (h.sender < 0 || h.sender >= self->size()) {
    EC_ERROR(kNet, "ucx: rank %d: dropped a notification from unknown rank %d", self->rank(),
             h.sender);
    return UCS_OK;
  }
  self->done_.push(TransportCompletion::Kind::kNotify, h.sender, h.tag, 0);
  return UCS_OK;
}

// Runs inside the driver's ucp_worker_progress() (or our destructor's).
ucs_status_t UcxTransport::on_control(void* arg, const void* header, size_t header_length,
                                      void* data, size_t length, const ucp_am_recv_param_t* param) {
  (void)data;
  (void)param;
  auto* self = static_cast<UcxTransport*>(arg);
  if (self == nullptr) return UCS_OK;
  NoteHeader h;
  if (header_length != sizeof(h) || length != 0) return UCS_OK;
  std::memcpy(&h, header, sizeof(h));
  if (h.sender < 0 || h.sender >= self->size()) return UCS_OK;
  Peer& p = self->peers_[h.sender];
  if (h.tag == kBye) {
    EC_DEBUG(kNet, "ucx: rank %d: rank %d closed its transport", self->rank(), h.sender);
    p.bye_received = true;
    if (!self->closing_) self->acks_due_.push_back(h.sender);
  } else if (h.tag == kByeAck) {
    p.answered = true;
  }
  // kWake needs nothing: its arrival woke the worker's event fd.
  return UCS_OK;
}

// UCX lost the endpoint (peer-failure mode only). Expected after the peer said goodbye or
// while we close; anything else is a lost peer.
void UcxTransport::on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status) {
  (void)ep;
  Peer* p = static_cast<Peer*>(arg);
  UcxTransport* self = p->owner;
  p->ep_failed = true;
  if (p->bye_received || self->closing_) {
    EC_DEBUG(kNet, "ucx: rank %d: connection to rank %d ended: %s", self->rank(), p->rank,
             ucs_status_string(status));
    return;
  }
  self->peer_failed(p->rank, status, "the connection");
}

Status UcxTransport::send_control(int peer, Control kind) {
  Op* op = take_op(peer);
  if (op == nullptr) return Status(StatusCode::kBusy, {});
  op->header = NoteHeader{rank(), kind};
  op->cookie = 0;
  op->parts = 1;
  ucp_request_param_t param{};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_AM_SEND_FLAG_EAGER;
  param.cb.send = &UcxTransport::on_note_sent;
  param.user_data = op;
  ucs_status_ptr_t r = ucp_am_send_nbx(peers_[peer].ep, kControlAmId, &op->header,
                                       sizeof(op->header), nullptr, 0, &param);
  Status result;
  if (UCS_PTR_IS_ERR(r)) {
    result = make_status(code_of(UCS_PTR_STATUS(r)), "ucx: control message to rank %d: %s", peer,
                         ucs_status_string(UCS_PTR_STATUS(r)));
  } else if (r != nullptr) {
    op->am_request = r;
    ++op->parts;
  }
  release_part(op);
  return result;
}

Status UcxTransport::send_note(Op* op, ucp_ep_h ep) {
  ucp_request_param_t param{};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_AM_SEND_FLAG_EAGER;
  param.cb.send = &UcxTransport::on_note_sent;
  param.user_data = op;
  ++op->parts;
  ucs_status_ptr_t r =
      ucp_am_send_nbx(ep, kNotifyAmId, &op->header, sizeof(op->header), nullptr, 0, &param);
  if (r == nullptr) {
    release_part(op);
    return Status::Ok();
  }
  if (UCS_PTR_IS_ERR(r)) {
    const ucs_status_t s = UCS_PTR_STATUS(r);
    release_part(op);
    peer_failed(op->peer, s, "a notification");
    return make_status(code_of(s), "ucx: notification to rank %d failed: %s", op->peer,
                       ucs_status_string(s));
  }
  op->am_request = r;
  return Status::Ok();
}

Status UcxTransport::write(const MemoryRegion& local, size_t local_offset,
                           const RemoteRegion& remote, size_t remote_offset, size_t bytes,
                           uint32_t tag, uint64_t cookie) {
  const auto* src = exactly<UcxRegion>(local);
  if (src == nullptr || src->core() != core_.get()) {
    return make_status(StatusCode::kInvalidArgument,
                       "ucx: write: the local region was not made by this ucx transport");
  }
  const auto* dst = exactly<UcxRemote>(remote);
  if (dst == nullptr || dst->core() != core_.get()) {
    return make_status(StatusCode::kInvalidArgument,
                       "ucx: write: the remote region was not imported by this ucx transport");
  }
  EC_RETURN_IF_ERROR(check_write_bounds("ucx", local, local_offset, remote, remote_offset, bytes));
  const int peer = remote.peer();  // in range: import_region() checked it
  Peer& p = peers_[peer];
  if (closed_ || !p.ep || p.bye_received || p.failed) return check_sendable(peer, "write");
  if (p.ring.attached()) {
    // The peer's memory is mapped here: stores, then the ring. Memory that is not mapped is
    // put and flushed first, since a ring push is not ordered after a put.
    EC_RETURN_IF_ERROR(ring_room(peer));
    const auto* from = static_cast<const uint8_t*>(local.data()) + local_offset;
    if (bytes > 0 && dst->mapped() == nullptr) {
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_MEMH;
      param.memh = src->memh();
      ucs_status_ptr_t r =
          ucp_put_nbx(p.ep, from, bytes, dst->base() + remote_offset, dst->rkey(), &param);
      if (UCS_PTR_IS_ERR(r)) {
        const ucs_status_t st = UCS_PTR_STATUS(r);
        if (st == UCS_ERR_NO_RESOURCE) return Status(StatusCode::kBusy, {});
        peer_failed(peer, st, "a put");
        return make_status(code_of(st), "ucx: put of %zu bytes to rank %d failed: %s", bytes, peer,
                           ucs_status_string(st));
      }
      if (r != nullptr) ucp_request_free(r);  // flush_peer() waits for it
      EC_RETURN_IF_ERROR(flush_peer(peer));
    }
    if (bytes > 0 && dst->mapped() != nullptr && local.kind() == MemoryKind::kCuda) {
      // A GPU source cannot be read by host stores: cudaMemcpy into the mapped memory instead.
      EC_RETURN_IF_ERROR(
          gpu::copy(static_cast<uint8_t*>(dst->mapped()) + remote_offset, from, bytes));
      ring_push(p, tag);
      done_.push(TransportCompletion::Kind::kWriteDone, peer, tag, cookie);
      return Status::Ok();
    }
    // Nothing can fail from here on. The stores first: the time from a poll() that saw a
    // notification to the store of the answer is the latency a ping-pong adds per hop.
    if (bytes > 0 && dst->mapped() != nullptr) {
      copy_small(static_cast<uint8_t*>(dst->mapped()) + remote_offset, from, bytes);
    }
    ring_push(p, tag);
    done_.push(TransportCompletion::Kind::kWriteDone, peer, tag, cookie);
    return Status::Ok();
  }
  Op* op = take_op(peer);
  if (op == nullptr) return Status(StatusCode::kBusy, {});
  op->header = NoteHeader{rank(), tag};
  op->cookie = cookie;
  op->parts = 1;  // held by this call until the notification is issued
  ucp_ep_h ep = peers_[peer].ep;
  if (bytes > 0) {
    ucp_request_param_t param{};
    param.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMH;
    param.cb.send = &UcxTransport::on_put_done;
    param.user_data = op;
    param.memh = src->memh();
    ucs_status_ptr_t r = ucp_put_nbx(ep, static_cast<const uint8_t*>(local.data()) + local_offset,
                                     bytes, dst->base() + remote_offset, dst->rkey(), &param);
    if (UCS_PTR_IS_ERR(r)) {
      const ucs_status_t s = UCS_PTR_STATUS(r);
      release_part(op);
      if (s == UCS_ERR_NO_RESOURCE) return Status(StatusCode::kBusy, {});
      peer_failed(peer, s, "a put");
      return make_status(code_of(s), "ucx: put of %zu bytes to rank %d failed: %s", bytes, peer,
                         ucs_status_string(s));
    }
    if (r == nullptr) {
      done_.push(TransportCompletion::Kind::kWriteDone, peer, tag, cookie);
    } else {
      op->put_request = r;
      ++op->parts;
    }
  } else {
    done_.push(TransportCompletion::Kind::kWriteDone, peer, tag, cookie);
  }
  // The put must be complete at the target before the notification is processed there.
  const ucs_status_t f = ucp_worker_fence(core_->worker);
  if (f != UCS_OK) {
    release_part(op);
    return ucx_failure(f, "fence after a put to rank " + std::to_string(peer));
  }
  Status s = send_note(op, ep);
  release_part(op);
  return s;
}

Status UcxTransport::notify(int peer, uint32_t tag) {
  EC_RETURN_IF_ERROR(check_sendable(peer, "notify"));
  if (peers_[peer].ring.attached()) return ring_notify(peer, tag);
  Op* op = take_op(peer);
  if (op == nullptr) return Status(StatusCode::kBusy, {});
  op->header = NoteHeader{rank(), tag};
  op->cookie = 0;
  op->parts = 1;
  // Publishes stores made through mapped_address() before the notification leaves.
  fence(std::memory_order_release);
  Status s = send_note(op, peers_[peer].ep);
  release_part(op);
  return s;
}

Status UcxTransport::ring_room(int peer) {
  switch (peers_[peer].ring.room()) {
    case shm_ring::Room::kOk:
      return Status::Ok();
    case shm_ring::Room::kFull:
      return Status(StatusCode::kBusy, {});
    case shm_ring::Room::kCorrupt:
      break;
  }
  peer_failed(peer, UCS_ERR_IO_ERROR, "its notification ring (impossible head index)");
  return make_status(StatusCode::kProtocolError,
                     "ucx: rank %d corrupted its notification ring (impossible head index)", peer);
}

Status UcxTransport::ring_notify(int peer, uint32_t tag) {
  EC_RETURN_IF_ERROR(ring_room(peer));
  ring_push(peers_[peer], tag);
  return Status::Ok();
}

void UcxTransport::ring_push(Peer& p, uint32_t tag) {
  // A release store: data stored through mappings before it is visible with the tag.
  p.ring.push(tag);
  // Dekker with wait(): the receiver announces itself in `sleepers`, then looks at its rings;
  // we pushed, then look at `sleepers` with a read-modify-write: both sides' RMWs on that word
  // are ordered, so one of the two sees the other (a fence and a load would do on x86, but
  // not in the C++ model TSan checks).
  if (p.sleepers->fetch_add(0, std::memory_order_seq_cst) != 0) {
    if (send_control(p.rank, kWake).code() == StatusCode::kBusy) {
      p.wake_due = true;
      any_wake_due_ = true;
    }
  }
}

Status UcxTransport::flush_peer(int peer) {
  ucp_request_param_t param{};
  ucs_status_ptr_t r = ucp_ep_flush_nbx(peers_[peer].ep, &param);
  if (r == nullptr) return Status::Ok();
  ucs_status_t st = UCS_PTR_IS_ERR(r) ? UCS_PTR_STATUS(r) : UCS_INPROGRESS;
  while (st == UCS_INPROGRESS) {
    ucp_worker_progress(core_->worker);
    st = ucp_request_check_status(r);
  }
  if (!UCS_PTR_IS_ERR(r)) ucp_request_free(r);
  if (st == UCS_OK) return Status::Ok();
  peer_failed(peer, st, "a flush");
  return make_status(code_of(st), "ucx: flushing puts to rank %d failed: %s", peer,
                     ucs_status_string(st));
}

size_t UcxTransport::drain_rings(std::span<TransportCompletion> out) {
  size_t n = 0;
  int failed = -1;
  for (const int sender : ring_senders_) {
    if (n == out.size()) break;
    shm_ring::Consumer& ring = consumers_[sender];
    const size_t before = n;
    uint32_t tag = 0;
    int got = 0;
    while (n < out.size() && (got = ring.try_pop(tag)) > 0) {
      TransportCompletion& c = out[n++];  // field by field: see push()
      c.kind = TransportCompletion::Kind::kNotify;
      c.peer = sender;
      c.tag = tag;
      c.cookie = 0;
    }
    if (n != before) ring.publish();
    if (got < 0) failed = sender;
  }
  if (failed >= 0) {  // at most one per call; a later call finds the next
    std::erase(ring_senders_, failed);
    EC_ERROR(kNet,
             "ucx: rank %d: rank %d's notification ring holds impossible entries; ignoring it "
             "from now on",
             rank(), failed);
    if (!peers_[failed].failed) {
      peers_[failed].failed_why =
          "ucx: rank " + std::to_string(failed) + "'s notification ring holds impossible entries";
    }
    if (!peers_[failed].failed && n < out.size()) {
      peers_[failed].failed = true;
      TransportCompletion& c = out[n++];
      c.kind = TransportCompletion::Kind::kPeerError;
      c.peer = failed;
      c.tag = 0;
      c.cookie = 0;
    } else if (!peers_[failed].failed) {
      peers_[failed].failed = true;
      done_.push(TransportCompletion::Kind::kPeerError, failed, 0, 0);
    }
  }
  return n;
}

bool UcxTransport::rings_maybe_nonempty() const {
  for (int sender = 0; sender < size(); ++sender) {
    if (consumers_[sender].maybe_nonempty()) return true;
  }
  return false;
}

void* UcxTransport::mapped_address(const RemoteRegion& remote) {
  const auto* r = exactly<UcxRemote>(remote);
  if (r == nullptr || r->core() != core_.get()) return nullptr;
  return r->mapped();
}

size_t UcxTransport::poll(std::span<TransportCompletion> out) {
  if (closed_) return 0;
  // Rings first; the worker's progress (the expensive part of a poll) waits for a later call, at
  // most kRingPollsPerProgress of them.
  if (++ring_polls_ < kRingPollsPerProgress && !progress_due_.load(std::memory_order_relaxed)) {
    fence(std::memory_order_acquire);
    const size_t n = done_.drain(out);
    return n + drain_rings(out.subspan(n));
  }
  ring_polls_ = 0;
  progress_due_.store(false, std::memory_order_relaxed);
  int progressed = 0;
  for (int pass = 0; pass < kProgressPasses; ++pass) {
    const unsigned events = ucp_worker_progress(core_->worker);
    progressed += events;
    if (events == 0) break;
    if (done_.size() >= out.size()) break;
  }
  if (progressed == 0 && done_.size() == 0 && watching_.load(std::memory_order_relaxed)) {
    // A load and a store, not a read-modify-write (see the shm backend).
    const unsigned idle = idle_polls_.load(std::memory_order_relaxed) + 1;
    idle_polls_.store(idle, std::memory_order_relaxed);
    if (idle >= kIdlePollsPerClockRead) {
      idle_polls_.store(0, std::memory_order_relaxed);
      probe_peers();
    }
  }
  if (any_wake_due_) {
    any_wake_due_ = false;
    for (Peer& p : peers_) {
      if (!p.wake_due) continue;
      if (send_control(p.rank, kWake).code() == StatusCode::kBusy) {
        any_wake_due_ = true;
      } else {
        p.wake_due = false;
      }
    }
  }
  // Answer goodbyes here, not in the AM handler (no sends from inside progress).
  while (!acks_due_.empty()) {
    const int peer = acks_due_.back();
    const Peer& p = peers_[peer];
    if (p.ep && !p.ep_failed && send_control(peer, kByeAck).code() == StatusCode::kBusy) break;
    acks_due_.pop_back();
  }
  // Pairs with the sender's release fence in notify(): data stored through mapped memory
  // before a notification is visible once the notification is.
  fence(std::memory_order_acquire);
  const size_t n = done_.drain(out);
  return n + drain_rings(out.subspan(n));
}

int UcxTransport::claim_wait_slot() {
  for (int i = 0; i < kWaitSlots; ++i) {
    bool expected = false;
    if (!slots_[i].busy.load(std::memory_order_relaxed) &&
        slots_[i].busy.compare_exchange_strong(expected, true, std::memory_order_seq_cst)) {
      return i;
    }
  }
  return -1;
}

void UcxTransport::signal_slot(int i) {
  const uint64_t one = 1;
  // EAGAIN only when the counter is saturated: the slot is signalled anyway.
  if (::write(slots_[i].fd.get(), &one, sizeof(one)) < 0 && errno != EAGAIN) {
    EC_WARN(kNet, "ucx: signalling a waiter failed: %m");
  }
}

// Sleeping without losing wake-ups, while another thread may be driving:
//
//  - wake() sets woken_ and then signals the eventfd of every claimed wait slot; wait() claims
//    a slot, drains its eventfd and then tests woken_. Both sides are seq_cst, so either wait()
//    sees woken_ or wake() sees the slot and signals it (a Dekker pair); nothing drains a
//    claimed slot but its owner, so concurrent waiters cannot steal each other's wake-ups
//    (one shared eventfd could: a second waiter re-checks readiness after the first drained).
//  - Network events: UCP's event fd only fires after ucp_worker_arm(), which returns BUSY when
//    events are pending. The worker runs in UCS_THREAD_MODE_MULTI, so arming from this thread
//    is serialized by UCX with the driver's ucp_worker_progress(). After arming we re-check
//    our completion queue: a driver's progress that finished before the arm has queued what
//    it found; one that starts after it runs on events that arrive after the arm, which
//    signal the fd (spurious wake-ups, allowed by the contract).
//  - Arming drains transport signals (shared memory's socket) that another sleeping thread
//    may also be polling; a waiter whose arm says BUSY therefore signals the other waiters,
//    so that a sleeping driver still learns that there is work.
//  - woken_ is consumed only on entry (like inproc): a wake() while threads sleep makes them
//    return and also makes the next wait() return, which is a spurious return, never a lost
//    one.
void UcxTransport::wait(std::chrono::nanoseconds timeout) {
  if (woken_.exchange(false, std::memory_order_acq_rel)) return;
  if (timeout == std::chrono::nanoseconds::zero()) return;  // zero only polls: nothing to do
  const int slot = claim_wait_slot();
  if (slot >= 0) {
    uint64_t drained;
    while (::read(slots_[slot].fd.get(), &drained, sizeof(drained)) > 0) {
    }
  }
  auto done = [&] {
    if (slot >= 0) slots_[slot].busy.store(false, std::memory_order_seq_cst);
  };
  // Announced to ring producers before the last look at the rings (see ring_notify()).
  notify_block_->sleepers.fetch_add(1, std::memory_order_seq_cst);
  auto done_inner = done;
  auto done2 = [&] {
    notify_block_->sleepers.fetch_sub(1, std::memory_order_relaxed);
    done_inner();
  };
  if (woken_.exchange(false, std::memory_order_seq_cst) || done_.any() || rings_maybe_nonempty()) {
    return done2();
  }
  bool armed = false;
  if (can_arm_) {
    const ucs_status_t s = ucp_worker_arm(core_->worker);
    if (s == UCS_ERR_BUSY) {
      progress_due_.store(true, std::memory_order_relaxed);
      for (int i = 0; i < kWaitSlots; ++i) {
        if (i != slot && slots_[i].busy.load(std::memory_order_seq_cst)) signal_slot(i);
      }
      return done2();
    }
    if (s == UCS_OK) {
      armed = true;
    } else {
      EC_WARN(kNet, "ucx: rank %d: arming the worker failed: %s", rank(), ucs_status_string(s));
    }
    if (done_.any()) return done2();
  }
  // Without an armed worker or an own slot, nap briefly instead of sleeping for the timeout.
  const bool forever =
      timeout < std::chrono::nanoseconds::zero() || timeout == std::chrono::nanoseconds::max();
  std::chrono::nanoseconds limit = timeout;
  if (watching_.load(std::memory_order_relaxed)) {
    // Peers on this host are probed for a dead process from poll(): wake up for that.
    limit = forever ? std::chrono::nanoseconds(kLivenessInterval)
                    : std::min<std::chrono::nanoseconds>(timeout, kLivenessInterval);
    idle_polls_.store(kIdlePollsPerClockRead, std::memory_order_relaxed);
  }
  if (!armed || slot < 0) {
    limit = forever && !watching_ ? std::chrono::nanoseconds(kUnarmedNap)
                                  : std::min<std::chrono::nanoseconds>(limit, kUnarmedNap);
  }
  struct pollfd fds[2];
  nfds_t n = 0;
  if (armed) fds[n++] = {worker_efd_, POLLIN, 0};
  if (slot >= 0) fds[n++] = {slots_[slot].fd.get(), POLLIN, 0};
  const bool infinite = forever && armed && slot >= 0 && !watching_;
  struct timespec ts;
  if (!infinite) {
    const auto secs = std::chrono::duration_cast<std::chrono::seconds>(limit);
    ts.tv_sec = static_cast<time_t>(secs.count());
    ts.tv_nsec = static_cast<long>((limit - secs).count());
  }
  if (::ppoll(fds, n, infinite ? nullptr : &ts, nullptr) < 0 && errno != EINTR) {
    EC_WARN(kNet, "ucx: rank %d: ppoll in wait() failed: %m", rank());
  }
  progress_due_.store(true, std::memory_order_relaxed);
  done2();
}

bool UcxTransport::peer_left(int peer) const {
  return peer >= 0 && peer < size() && peers_[peer].bye_received;
}

Status UcxTransport::peer_error(int peer) const {
  if (peer >= 0 && peer < size() && !peers_[peer].failed_why.empty()) {
    return make_status(StatusCode::kPeerFailed, "%s", peers_[peer].failed_why.c_str());
  }
  return Transport::peer_error(peer);
}

void UcxTransport::wake() {
  woken_.store(true, std::memory_order_seq_cst);
  for (int i = 0; i < kWaitSlots; ++i) {
    if (slots_[i].busy.load(std::memory_order_seq_cst)) signal_slot(i);
  }
}

}  // namespace

Status ucx_memory_kind_supported(MemoryKind kind, bool ucx_has_cuda) {
  if (kind == MemoryKind::kHost) return Status::Ok();
  if (kind == MemoryKind::kCuda && ucx_has_cuda) return Status::Ok();
  if (kind == MemoryKind::kCuda) {
    return Status(StatusCode::kNotSupported,
                  "ucx: CUDA memory needs a UCX built with CUDA support (its cuda_copy / cuda_ipc "
                  "transports); this UCX reports no UCS_MEMORY_TYPE_CUDA (ucx_info -d lists its "
                  "transports; distribution packages such as Debian's UCX 1.13 have none)");
  }
  return make_status(StatusCode::kNotSupported, "ucx: memory kind %s is not supported",
                     std::string(memory_kind_name(kind)).c_str());
}

Result<std::unique_ptr<Transport>> create_ucx_transport(const TransportParams& params) {
  return create_ucx_transport(params, UcxTransportOptions{});
}

Result<std::unique_ptr<Transport>> create_ucx_transport(const TransportParams& params,
                                                        const UcxTransportOptions& options) {
  if (params.size < 1 || params.rank < 0 || params.rank >= params.size) {
    return make_status(StatusCode::kInvalidArgument, "ucx: rank %d is not in a world of size %d",
                       params.rank, params.size);
  }
  UcxTransportOptions opts = options;
  if (opts.max_outstanding == 0) {
    const size_t slots = params.config ? params.config->slots : TransportConfig{}.slots;
    opts.max_outstanding =
        std::max<size_t>(1024, 4 * static_cast<size_t>(params.size) * slots + 256);
  }

  auto core = std::make_shared<UcxCore>();
  ucp_config_t* ucx_config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &ucx_config);
  if (s != UCS_OK) {
    EC_ERROR(kNet, "ucx: reading the UCX_* configuration failed: %s", ucs_status_string(s));
    return make_status(StatusCode::kUnavailable, "ucx: reading the UCX_* configuration failed: %s",
                       ucs_status_string(s));
  }
  ucp_params_t up{};
  up.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED |
                  UCP_PARAM_FIELD_ESTIMATED_NUM_EPS | UCP_PARAM_FIELD_NAME;
  up.features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  // Regions may be mapped and unmapped from other threads than the driver.
  up.mt_workers_shared = 1;
  up.estimated_num_eps = static_cast<size_t>(params.size);
  up.name = "eagercomm";
  s = ucp_init(&up, ucx_config, &core->context);
  ucp_config_release(ucx_config);
  if (s != UCS_OK) {
    core->context = nullptr;
    EC_ERROR(kNet, "ucx: rank %d: ucp_init failed: %s (%s)", params.rank, ucs_status_string(s),
             tls_hint().c_str());
    return make_status(StatusCode::kUnavailable, "ucx: ucp_init failed: %s (%s)",
                       ucs_status_string(s), tls_hint().c_str());
  }
  // Whether UCX can take CUDA memory: only builds with its cuda transports loaded say so.
  ucp_context_attr_t ca{};
  ca.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  core->cuda_memory = ucp_context_query(core->context, &ca) == UCS_OK &&
                      (ca.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // MULTI: wait() arms the worker from threads that are not driving (see wait()).
  wp.thread_mode = UCS_THREAD_MODE_MULTI;
  s = ucp_worker_create(core->context, &wp, &core->worker);
  if (s != UCS_OK) {
    core->worker = nullptr;
    return ucx_failure(s, "creating the worker");
  }
  const uint32_t ring_capacity =
      shm_ring_capacity_for(params.config ? params.config->slots : TransportConfig{}.slots);
  auto transport =
      std::make_unique<UcxTransport>(params.rank, params.size, opts, std::move(core),
                                     params.config ? params.config->job_id : "", ring_capacity);
  EC_RETURN_IF_ERROR(transport->init());
  return std::unique_ptr<Transport>(std::move(transport));
}

}  // namespace eagercomm
