#include "transport/shm/shm_transport.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "runtime/deadline.h"
#include "runtime/event_count.h"
#include "transport/cuda_ipc/cuda_ipc_key.h"
#include "transport/cuda_ipc/cuda_ipc_region.h"
#include "transport/local_completions.h"
#include "transport/notify_ring/ring_block.h"
#include "transport/peer_liveness.h"
#include "transport/shm/shm_reclaim.h"
#include "transport/shm/shm_segment.h"
#include "transport/transport_log.h"
#include "transport/write_bounds.h"

namespace eagercomm {
namespace {

// Largest world the control segment is laid out for (one ring per sender).
constexpr int kMaxRanks = 1 << 16;
// How often idle ranks probe whether their peers' processes still exist, and the longest a
// wait() sleeps so that such a probe happens even when nothing else wakes the rank.
constexpr auto kLivenessInterval = std::chrono::milliseconds(100);
// Polls that found nothing between two looks at the clock for the liveness probe.
constexpr unsigned kIdlePollsPerClockRead = 64;

std::string beacon_name(const std::string& control_segment) { return control_segment + "-live"; }

// The start of a control segment's payload, the header of its ring block (ring_block.h): the
// rings follow at kControlBlockBytes.
struct ControlBlock {
  uint32_t world_size;     // written once by the owner before its address is published
  uint32_t ring_capacity;  // likewise
  alignas(64) EventCount event;
  alignas(64) std::atomic<uint32_t> woken;  // sticky wake(): nonzero until a wait() takes it
  // The owner's close(): nonzero from then on, and peers' write() and notify() that start
  // after it refuse. (Read-mostly; no count of writers: two contended read-modify-writes per
  // write on this line would cost every write.)
  alignas(64) std::atomic<uint32_t> closed;
};
constexpr size_t kControlBlockBytes = (sizeof(ControlBlock) + 63) / 64 * 64;

size_t control_bytes(int world, uint32_t capacity) {
  return notify_ring::block_bytes(kControlBlockBytes, world, capacity);
}

std::atomic<uint64_t> g_next_transport_id{1};

class ShmRegion final : public MemoryRegion {
 public:
  ShmRegion(std::unique_ptr<ShmSegment> segment, std::shared_ptr<ShmOwnedNames> names,
            MemoryKind kind)
      : MemoryRegion(segment->payload(), segment->payload_bytes(), kind),
        segment_(std::move(segment)),
        names_(std::move(names)) {
    remote_key_ = segment_->key().pack();
  }
  // Peers that imported the segment keep their mappings; only the name goes.
  ~ShmRegion() override { names_->release(segment_->name()); }

 private:
  std::unique_ptr<ShmSegment> segment_;
  std::shared_ptr<ShmOwnedNames> names_;
};

class ShmRemote final : public RemoteRegion {
 public:
  ShmRemote(int peer, std::shared_ptr<ShmSegment> segment, uint64_t transport_id)
      : RemoteRegion(peer, segment->payload_bytes()),
        segment_(std::move(segment)),
        transport_id_(transport_id) {}
  uint8_t* base() const { return segment_->payload(); }
  uint64_t transport_id() const { return transport_id_; }

 private:
  std::shared_ptr<ShmSegment> segment_;
  uint64_t transport_id_;
};

class ShmTransport final : public Transport {
 public:
  static Result<std::unique_ptr<Transport>> create(const TransportParams& params, std::string job);
  ~ShmTransport() override {
    close();
    names_->release_all();
  }

  // Peers' write() and notify() refuse once `closed` is set; the beacon goes before the
  // segments do, so peers see a departure (kLeft), not a death. Stores through
  // mapped_address() are the peers' own and cannot be stopped.
  void close() override {
    if (closed_) return;
    closed_ = true;
    block_->closed.store(1, std::memory_order_release);
    beacon_.reset();
  }

  std::string_view name() const override { return "shm"; }

  Result<std::unique_ptr<MemoryRegion>> allocate(size_t bytes, MemoryKind kind) override {
    EC_RETURN_IF_ERROR(check_kind(kind, "allocate"));
    if (kind == MemoryKind::kCuda) {
      EC_RETURN_IF_ERROR(cuda_memory_available("shm: allocate"));
      return CudaIpcRegion::allocate(bytes, rank());
    }
    const std::string name = shm_segment_name(job_, scope_, rank(), next_segment_++);
    EC_ASSIGN_OR_RETURN(std::unique_ptr<ShmSegment> segment,
                        ShmSegment::create(name, bytes, rank(), ShmSegmentKind::kData));
    names_->add(name);
    return std::unique_ptr<MemoryRegion>(
        std::make_unique<ShmRegion>(std::move(segment), names_, kind));
  }

  Result<std::unique_ptr<MemoryRegion>> register_memory(void* data, size_t bytes,
                                                        MemoryKind kind) override {
    EC_RETURN_IF_ERROR(check_kind(kind, "register_memory"));
    if (data == nullptr && bytes > 0) {
      return make_status(StatusCode::kInvalidArgument,
                         "shm: cannot register a null pointer with %zu bytes", bytes);
    }
    // Device memory, unlike host memory, can be shared after the fact: by a CUDA IPC handle.
    if (kind == MemoryKind::kCuda) {
      EC_RETURN_IF_ERROR(cuda_memory_available("shm: register_memory"));
      return CudaIpcRegion::wrap(data, bytes, rank());
    }
    return make_status(StatusCode::kNotSupported,
                       "shm: register_memory(%p, %zu): memory of one process cannot be shared "
                       "with the other processes after the fact; use allocate() for memory peers "
                       "write into",
                       data, bytes);
  }

  Result<std::unique_ptr<RemoteRegion>> import_region(int peer,
                                                      std::span<const uint8_t> blob) override {
    EC_RETURN_IF_ERROR(check_peer(peer, "import_region"));
    const std::string what = "remote key from rank " + std::to_string(peer);
    if (CudaIpcKey::claims(blob)) return import_cuda_region(peer, blob, what);
    EC_ASSIGN_OR_RETURN(ShmKey key, ShmKey::unpack(blob, what.c_str()));
    if (key.kind != ShmSegmentKind::kData) {
      return make_status(StatusCode::kProtocolError,
                         "shm: %s is a transport address, not a region key", what.c_str());
    }
    EC_RETURN_IF_ERROR(check_owner(key.owner, peer, what));
    EC_RETURN_IF_ERROR(check_segment_name(key, peer, what));
    std::lock_guard<std::mutex> lock(import_mu_);
    std::erase_if(imports_, [](const auto& entry) { return entry.second.expired(); });
    const auto id = std::make_pair(key.name, key.check);
    std::shared_ptr<ShmSegment> segment;
    if (auto it = imports_.find(id); it != imports_.end()) segment = it->second.lock();
    if (!segment) {
      EC_ASSIGN_OR_RETURN(std::unique_ptr<ShmSegment> opened, ShmSegment::open(key, what.c_str()));
      segment = std::move(opened);
      imports_[id] = segment;
    }
    return std::unique_ptr<RemoteRegion>(
        std::make_unique<ShmRemote>(peer, std::move(segment), id_));
  }

  std::vector<uint8_t> local_address() const override { return address_; }

  Status connect(int peer, std::span<const uint8_t> address) override {
    EC_RETURN_IF_ERROR(check_peer(peer, "connect"));
    const std::string what = "address of rank " + std::to_string(peer);
    EC_ASSIGN_OR_RETURN(ShmKey key, ShmKey::unpack(address, what.c_str()));
    if (key.kind != ShmSegmentKind::kControl) {
      return make_status(StatusCode::kProtocolError,
                         "shm: %s is a region key, not a transport address", what.c_str());
    }
    EC_RETURN_IF_ERROR(check_owner(key.owner, peer, what));
    EC_RETURN_IF_ERROR(check_segment_name(key, peer, what));
    // This rank's own entry is connected from the start (its ring in its own segment).
    Outbox& out = out_[peer];
    if (!out.address.empty()) {
      if (std::equal(address.begin(), address.end(), out.address.begin(), out.address.end())) {
        return Status::Ok();
      }
      return make_status(StatusCode::kInvalidArgument,
                         "shm: rank %d is already connected with a different address", peer);
    }
    // Mapped on first use (open_outbox): a rank maps the control segments of the peers it
    // talks to, not every rank's.
    out.address.assign(address.begin(), address.end());
    return Status::Ok();
  }

  // Maps `peer`'s control segment and attaches this rank's ring in it. The address was checked
  // by connect().
  Status open_outbox(int peer) {
    Outbox& out = out_[peer];
    if (out.address.empty()) {
      return make_status(StatusCode::kInvalidArgument,
                         "shm: rank %d is not connected (connect() it first)", peer);
    }
    const std::string what = "address of rank " + std::to_string(peer);
    EC_ASSIGN_OR_RETURN(ShmKey key, ShmKey::unpack(out.address, what.c_str()));
    Result<std::unique_ptr<ShmSegment>> opened = ShmSegment::open(key, what.c_str());
    if (!opened.ok()) {
      // It existed when the peer published its address: the peer has left or died since.
      return make_status(StatusCode::kPeerFailed,
                         "shm: rank %d is gone before rank %d connected (%s)", peer, rank(),
                         opened.status().message().c_str());
    }
    std::unique_ptr<ShmSegment> segment = std::move(opened.value());
    // Copied once: the peer could change these words later, the copies cannot change.
    uint32_t world = 0;
    uint32_t capacity = 0;
    if (segment->payload_bytes() >= kControlBlockBytes) {
      const auto* block = reinterpret_cast<const ControlBlock*>(segment->payload());
      std::memcpy(&world, &block->world_size, sizeof(world));
      std::memcpy(&capacity, &block->ring_capacity, sizeof(capacity));
    }
    if (world != static_cast<uint32_t>(size())) {
      return make_status(StatusCode::kMismatch,
                         "shm: rank %d was started with world size %u, this rank (%d) with %d",
                         peer, world, rank(), size());
    }
    if (!notify_ring::valid_capacity(capacity) ||
        segment->payload_bytes() != control_bytes(size(), capacity)) {
      return make_status(StatusCode::kProtocolError,
                         "shm: the control segment %s of rank %d is malformed (ring capacity "
                         "%u, %llu bytes)",
                         segment->name().c_str(), peer, capacity,
                         static_cast<unsigned long long>(segment->payload_bytes()));
    }
    // The peer made its beacon before publishing its address: a missing one means it is gone.
    Result<LivenessWatch> live = LivenessWatch::open(beacon_name(key.name));
    if (!live.ok()) {
      return make_status(StatusCode::kPeerFailed,
                         "shm: rank %d is gone before rank %d connected "
                         "(%s)",
                         peer, rank(), live.status().message().c_str());
    }
    out.live = std::move(live.value());
    auto* block = reinterpret_cast<ControlBlock*>(segment->payload());
    out.ring = notify_ring::producer_at(segment->payload(), kControlBlockBytes, rank(), capacity);
    out.block = block;
    out.event = &block->event;
    out.segment = std::move(segment);
    out.connected = true;
    ++connected_peers_;
    EC_DEBUG(kNet, "shm: connected to rank %d (%s)", peer, key.name.c_str());
    return Status::Ok();
  }

  Status write(const MemoryRegion& local, size_t local_offset, const RemoteRegion& remote,
               size_t remote_offset, size_t bytes, uint32_t tag, uint64_t cookie) override {
    uint8_t* to = nullptr;
    MemoryKind to_kind = MemoryKind::kHost;
    if (const auto* host = exactly<ShmRemote>(remote); host && host->transport_id() == id_) {
      to = host->base();
    } else if (const auto* device = exactly<CudaIpcRemote>(remote);
               device && device->transport_id() == id_) {
      to = device->address();
      to_kind = MemoryKind::kCuda;
    } else {
      return make_status(StatusCode::kInvalidArgument,
                         "shm: write to a remote region that this transport did not import");
    }
    EC_RETURN_IF_ERROR(
        check_write_bounds("shm", local, local_offset, remote, remote_offset, bytes));
    const int peer = remote.peer();
    EC_RETURN_IF_ERROR(check_room(peer));
    if (peer_has_closed(peer)) return peer_closed(peer, "write");
    if (bytes > 0) {
      const Status copied = copy_for_write(to + remote_offset, to_kind,
                                           static_cast<const uint8_t*>(local.data()) + local_offset,
                                           local.kind(), bytes);
      if (!copied.ok()) {
        Status s = copied;
        s.prepend("shm: write of " + std::to_string(bytes) + " bytes to rank " +
                  std::to_string(peer) + ": ");
        return s;
      }
    }
    push(peer, tag);
    done_.push(TransportCompletion{TransportCompletion::Kind::kWriteDone, peer, tag, cookie});
    return Status::Ok();
  }

  Status notify(int peer, uint32_t tag) override {
    EC_RETURN_IF_ERROR(check_peer(peer, "notify"));
    EC_RETURN_IF_ERROR(check_room(peer));
    if (peer_has_closed(peer)) return peer_closed(peer, "notify");
    push(peer, tag);
    return Status::Ok();
  }

  // Device regions (CudaIpcRemote) are not mapped memory: null, and callers use write().
  void* mapped_address(const RemoteRegion& remote) override {
    const auto* r = exactly<ShmRemote>(remote);
    return r != nullptr && r->transport_id() == id_ ? r->base() : nullptr;
  }

  bool maps_allocations() const override { return true; }
  TransportCaps capabilities() const override {
    return {.ranks_on_one_host = true, .connects_on_demand = true};
  }
  uint32_t connected_peers() const override { return connected_peers_; }

  size_t poll(std::span<TransportCompletion> out) override {
    if (closed_) return 0;
    size_t n = done_.drain(out);
    const int world = size();
    for (int k = 0; k < world && n < out.size(); ++k) {
      const int sender = (poll_start_ + k) % world;
      Inbox& in = in_[sender];
      if (in.failed.load(std::memory_order_relaxed)) continue;
      const notify_ring::Drained d = notify_ring::drain(in.ring, sender, out.subspan(n));
      n += d.count;
      if (d.corrupt) {
        EC_ERROR(kNet,
                 "shm: rank %d's notification ring in this rank's control segment %s holds "
                 "impossible entries; ignoring that rank from now on",
                 sender, control_->name().c_str());
        in.failed.store(true, std::memory_order_release);
        // A corrupt ring is only found with room in `out` (drain()), so there is room for this.
        out[n++] = TransportCompletion{TransportCompletion::Kind::kPeerError, sender, 0, 0};
      }
    }
    poll_start_ = poll_start_ + 1 == world ? 0 : poll_start_ + 1;
    // A load and a store, not a read-modify-write: no locked instruction in the polling loop
    // (a lost count from a concurrent wait() only delays one probe).
    const unsigned idle = n == 0 ? idle_polls_.load(std::memory_order_relaxed) + 1 : 0;
    if (n == 0) idle_polls_.store(idle, std::memory_order_relaxed);
    if (idle >= kIdlePollsPerClockRead) {
      idle_polls_.store(0, std::memory_order_relaxed);
      n += probe_peers(out);
    }
    return n;
  }

  // The sleeper rule of notify_ring/sleepers.h, with the control block's EventCount as the word:
  // announced (prepare_wait), then the rings looked at; push() rings the EventCount.
  void wait(std::chrono::nanoseconds timeout) override {
    if (block_->woken.exchange(0, std::memory_order_acq_rel) != 0) return;
    const EventCount::Ticket ticket = block_->event.prepare_wait();
    if (may_have_work() || block_->woken.exchange(0, std::memory_order_acq_rel) != 0) {
      block_->event.cancel_wait();
      return;
    }
    // Bounded, so that an idle rank still probes its peers' liveness (poll() after the wait).
    idle_polls_.store(kIdlePollsPerClockRead, std::memory_order_relaxed);
    block_->event.commit_wait(ticket,
                              std::min<std::chrono::nanoseconds>(timeout, kLivenessInterval));
  }

  void wake() override {
    block_->woken.store(1, std::memory_order_release);
    block_->event.notify_all();
  }

  bool peer_left(int peer) const override {
    return peer >= 0 && peer < size() && peer != rank() && out_[peer].connected &&
           out_[peer].block != nullptr && peer_has_closed(peer);
  }

  Status peer_error(int peer) const override {
    if (peer >= 0 && peer < size() && !out_[peer].failed.ok()) return out_[peer].failed;
    if (peer >= 0 && peer < size() && in_[peer].failed.load(std::memory_order_acquire)) {
      return make_status(StatusCode::kPeerFailed,
                         "shm: rank %d's notification ring holds impossible entries (memory "
                         "corrupted, or a process of another job)",
                         peer);
    }
    return Transport::peer_error(peer);
  }

  // The peer's wait() takes `woken` after announcing itself (prepare_wait) and before it
  // sleeps, so a wake-up that comes just before the announcement is kept rather than lost.
  void wake_peer(int peer) override {
    if (peer < 0 || peer >= size() || peer == rank()) return;
    Outbox& out = out_[peer];
    if (!out.connected && (!out.failed.ok() || !open_outbox(peer).ok())) return;
    // Always stored (release), never skipped when already set: the peer's exchange of this
    // store is what makes the caller's earlier stores visible to it.
    out.block->woken.store(1, std::memory_order_release);
    out.event->notify_all();
  }

 private:
  // This rank's sending side towards one peer: its ring in the peer's control segment.
  struct Outbox {
    std::unique_ptr<ShmSegment> segment;  // the peer's control segment (none for this rank)
    notify_ring::Producer ring;
    ControlBlock* block = nullptr;  // the peer's (this rank's own for itself)
    EventCount* event = nullptr;
    std::vector<uint8_t> address;  // what connect() was given, for idempotence
    Status failed;                 // sticky: the peer corrupted the ring, or died
    LivenessWatch live;            // whether the peer's process still exists
    bool connected = false;
  };
  // One sender's ring in this rank's control segment.
  struct Inbox {
    notify_ring::Consumer ring;
    std::atomic<bool> failed{false};  // read by wait() on any thread
  };

  ShmTransport(const TransportParams& params, std::string job, std::unique_ptr<ShmSegment> control,
               std::shared_ptr<ShmOwnedNames> names, uint32_t capacity)
      : Transport(params.rank, params.size),
        job_(std::move(job)),
        scope_(params.scope),
        prefix_(shm_scope_prefix(job_, scope_)),
        id_(g_next_transport_id.fetch_add(1, std::memory_order_relaxed)),
        names_(std::move(names)),
        control_(std::move(control)),
        block_(reinterpret_cast<ControlBlock*>(control_->payload())),
        address_(control_->key().pack()),
        out_(params.size),
        in_(std::make_unique<Inbox[]>(params.size)) {
    for (int s = 0; s < params.size; ++s) {
      in_[s].ring = notify_ring::consumer_at(control_->payload(), kControlBlockBytes, s, capacity);
    }
    Outbox& self = out_[rank()];
    self.ring = notify_ring::producer_at(control_->payload(), kControlBlockBytes, rank(), capacity);
    self.block = block_;
    self.event = &block_->event;
    self.address = address_;
    self.connected = true;
  }

  bool peer_has_closed(int peer) const {
    return out_[peer].block->closed.load(std::memory_order_acquire) != 0;
  }

  Status peer_closed(int peer, const char* call) const {
    return make_status(StatusCode::kPeerFailed, "shm: %s: rank %d has closed its transport", call,
                       peer);
  }

  Status check_kind(MemoryKind kind, const char* call) const {
    if (kind == MemoryKind::kHost || kind == MemoryKind::kCuda) return Status::Ok();
    return make_status(StatusCode::kInvalidArgument, "shm: %s: unknown memory kind %u", call,
                       static_cast<unsigned>(kind));
  }

  Result<std::unique_ptr<RemoteRegion>> import_cuda_region(int peer, std::span<const uint8_t> blob,
                                                           const std::string& what) {
    EC_ASSIGN_OR_RETURN(const CudaIpcKey key, CudaIpcKey::unpack(blob, what.c_str()));
    EC_RETURN_IF_ERROR(check_owner(key.owner, peer, what));
    return CudaIpcRemote::import(peer, key, id_, what.c_str());
  }

  Status check_peer(int peer, const char* call) const {
    if (peer >= 0 && peer < size()) return Status::Ok();
    return make_status(StatusCode::kInvalidArgument, "shm: %s: peer rank %d out of range [0, %d)",
                       call, peer, size());
  }

  Status check_owner(int32_t owner, int peer, const std::string& what) const {
    if (owner == peer) return Status::Ok();
    return make_status(StatusCode::kProtocolError, "shm: %s belongs to rank %d", what.c_str(),
                       owner);
  }

  // A key may only name a segment of `peer` in this job and scope: a forged key must not make
  // this rank map (and write into) other jobs' memory.
  Status check_segment_name(const ShmKey& key, int peer, const std::string& what) const {
    const std::string expected = prefix_ + std::to_string(peer) + "-";
    if (key.name.compare(0, expected.size(), expected) != 0) {
      return make_status(StatusCode::kProtocolError,
                         "shm: %s names segment %s, which is not one of rank %d's in this job "
                         "and scope (%s*; do the ranks use the same EAGERCOMM_JOB_ID?)",
                         what.c_str(), key.name.c_str(), peer, expected.c_str());
    }
    return Status::Ok();
  }

  // Ok when one more tag fits on `peer`'s ring; kBusy when full; the sticky error when the peer
  // corrupted it.
  Status check_room(int peer) {
    if (closed_) return Status(StatusCode::kAborted, "shm: this transport was closed");
    Outbox& out = out_[peer];
    if (!out.failed.ok()) return out.failed;
    if (!out.connected) {
      if (Status opened = open_outbox(peer); !opened.ok()) {
        // Sticky: a peer whose segment or beacon is gone does not come back.
        if (opened.code() == StatusCode::kPeerFailed) out.failed = opened;
        return opened;
      }
    }
    switch (out.ring.room()) {
      case notify_ring::Room::kOk:
        return Status::Ok();
      case notify_ring::Room::kFull:
        return Status(StatusCode::kBusy, {});
      case notify_ring::Room::kCorrupt:
        break;
    }
    out.failed = make_status(StatusCode::kProtocolError,
                             "shm: rank %d corrupted the notification ring of rank %d in its "
                             "control segment (impossible head index)",
                             peer, rank());
    EC_ERROR(kNet, "%s", out.failed.message().c_str());
    return out.failed;
  }

  // Every kLivenessInterval: one kPeerError completion for each connected peer whose process
  // died (its beacon's lock was dropped by the kernel) since the last probe.
  size_t probe_peers(std::span<TransportCompletion> out) {
    const auto now = std::chrono::steady_clock::now();
    if (now < next_probe_) return 0;
    next_probe_ = deadline_after(kLivenessInterval, now);
    size_t n = 0;
    for (int peer = 0; peer < size() && n < out.size(); ++peer) {
      Outbox& o = out_[peer];
      if (peer == rank() || !o.connected || !o.live.valid() || !o.failed.ok()) continue;
      if (o.live.check() != LivenessWatch::State::kDead) continue;
      // Nothing left in /dev/shm, launcher or not: the dead rank's segments, then its beacon.
      const int segments = shm_remove_dead_owner_segments(beacon_name(o.segment->name()));
      o.live.reap();
      EC_DEBUG(kMem, "shm: removed rank %d's beacon and %d segments", peer, segments);
      o.failed = make_status(StatusCode::kPeerFailed,
                             "shm: rank %d's process is gone (killed or crashed)", peer);
      EC_ERROR(kNet, "shm: rank %d's process is gone (killed or crashed)", peer);
      out[n++] = TransportCompletion{TransportCompletion::Kind::kPeerError, peer, 0, 0};
    }
    return n;
  }

  void push(int peer, uint32_t tag) {
    Outbox& out = out_[peer];
    out.ring.push(tag);
    out.event->notify_all();
  }

  bool may_have_work() const {
    if (done_.any()) return true;
    for (int s = 0; s < size(); ++s) {
      if (!in_[s].failed.load(std::memory_order_acquire) && in_[s].ring.maybe_nonempty()) {
        return true;
      }
    }
    return false;
  }

  const std::string job_;
  const std::string scope_;
  const std::string prefix_;  // every segment name of this job and scope starts so
  const uint64_t id_;         // tells this transport's remote regions from others'
  std::shared_ptr<ShmOwnedNames> names_;
  std::unique_ptr<ShmSegment> control_;
  ControlBlock* block_;
  const std::vector<uint8_t> address_;
  uint64_t next_segment_ = 1;  // 0 is the control segment
  std::vector<Outbox> out_;
  std::unique_ptr<Inbox[]> in_;
  int poll_start_ = 0;
  LivenessBeacon beacon_;  // held while this rank lives (peer_liveness.h)
  bool closed_ = false;
  uint32_t connected_peers_ = 0;         // outboxes opened (open_outbox)
  std::atomic<unsigned> idle_polls_{0};  // also bumped by wait() on any thread
  std::chrono::steady_clock::time_point next_probe_{};
  // Imported segments by (name, check value), shared by every import of one segment. Import is
  // setup, not a data path; the mutex only guards the table.
  std::mutex import_mu_;
  std::map<std::pair<std::string, uint64_t>, std::weak_ptr<ShmSegment>> imports_;
  LocalCompletions done_;  // local write completions not yet polled
};

Result<std::unique_ptr<Transport>> ShmTransport::create(const TransportParams& params,
                                                        std::string job) {
  const uint32_t capacity = shm_ring_capacity_for(params.config->slots);
  const std::string name = shm_segment_name(job, params.scope, params.rank, 0);
  // Rank 0 clears what dead jobs left (once per job, not once per rank: a scan reads all of
  // /dev/shm).
  if (params.rank == 0) {
    const ShmReclaimed r = shm_reclaim_dead_jobs();
    if (r.objects > 0) {
      EC_WARN(kMem,
              "shm: removed %d shared-memory objects (%.1f MB) that %d dead ranks of earlier jobs "
              "left in /dev/shm",
              r.objects, static_cast<double>(r.bytes) / 1e6, r.owners);
    }
  }
  // The beacon exists before any segment does, so that a segment without a live beacon beside
  // it is never this rank's while it runs (shm_reclaim.h relies on it).
  EC_ASSIGN_OR_RETURN(LivenessBeacon beacon, LivenessBeacon::create(beacon_name(name)));
  EC_ASSIGN_OR_RETURN(std::unique_ptr<ShmSegment> control,
                      ShmSegment::create(name, control_bytes(params.size, capacity), params.rank,
                                         ShmSegmentKind::kControl));
  auto names = std::make_shared<ShmOwnedNames>();
  names->add(name);
  auto* block = reinterpret_cast<ControlBlock*>(control->payload());
  block->world_size = static_cast<uint32_t>(params.size);
  block->ring_capacity = capacity;
  std::construct_at(&block->event);
  std::construct_at(&block->woken, 0u);
  std::construct_at(&block->closed, 0u);
  notify_ring::init_rings(control->payload(), kControlBlockBytes, params.size, capacity);
  EC_INFO(kNet, "shm: control segment %s, %u-entry rings for %d ranks", name.c_str(), capacity,
          params.size);
  auto transport = std::unique_ptr<ShmTransport>(
      new ShmTransport(params, std::move(job), std::move(control), std::move(names), capacity));
  transport->beacon_ = std::move(beacon);
  return std::unique_ptr<Transport>(std::move(transport));
}

// EAGERCOMM_JOB_ID, or a random id rank 0 publishes for the others.
Result<std::string> job_for(const TransportParams& params) {
  std::string job = shm_sanitize_job_id(params.config->job_id);
  if (job.empty()) {
    const std::string key = params.scope + "/shm/job";
    if (params.rank == 0) {
      char buf[24];
      snprintf(buf, sizeof(buf), "r%016llx", static_cast<unsigned long long>(shm_random_u64()));
      job = buf;
      EC_RETURN_IF_ERROR(params.store->set(key, to_bytes(job)));
      EC_INFO(kNet, "shm: EAGERCOMM_JOB_ID is empty; segments use the random job id %s",
              job.c_str());
    } else {
      Result<Bytes> raw = params.store->get(key, params.config->timeout);
      if (!raw.ok()) {
        Status s = raw.status();
        s.prepend("shm: rank " + std::to_string(params.rank) +
                  " has no EAGERCOMM_JOB_ID and did not get rank 0's: ");
        return s;
      }
      job = to_string(raw.value());
      if (job.empty() || job != shm_sanitize_job_id(job)) {
        return make_status(StatusCode::kProtocolError,
                           "shm: rank 0 published a malformed job id under %s", key.c_str());
      }
    }
  }
  if (job.size() > kShmMaxJobIdChars) {
    return make_status(StatusCode::kInvalidArgument,
                       "shm: EAGERCOMM_JOB_ID has %zu characters; segment names allow at most %zu",
                       job.size(), kShmMaxJobIdChars);
  }
  return job;
}

}  // namespace

uint32_t shm_ring_capacity_for(uint32_t slots) { return notify_ring::capacity_for(slots); }

Result<std::unique_ptr<Transport>> create_shm_transport(const TransportParams& params) {
  if (params.store == nullptr || params.config == nullptr) {
    return make_status(StatusCode::kInvalidArgument, "shm: a store and a config are required");
  }
  if (params.size < 1 || params.size > kMaxRanks || params.rank < 0 || params.rank >= params.size) {
    return make_status(StatusCode::kInvalidArgument,
                       "shm: rank %d of world size %d (needs 0 <= rank < size <= %d)", params.rank,
                       params.size, kMaxRanks);
  }
  EC_ASSIGN_OR_RETURN(std::string job, job_for(params));
  return ShmTransport::create(params, std::move(job));
}

}  // namespace eagercomm
