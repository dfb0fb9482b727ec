#include "transport/inproc/inproc_transport.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "runtime/bounded_queue.h"
#include "runtime/event_count.h"
#include "runtime/gpu.h"
#include "transport/cuda_ipc/cuda_ipc_region.h"
#include "transport/inproc/inproc_key.h"
#include "transport/local_completions.h"
#include "transport/peer_contacts.h"
#include "transport/transport_log.h"
#include "transport/write_bounds.h"

namespace eagercomm {
namespace {

struct Note {
  int32_t peer;
  uint32_t tag;
};

// Memory reachable by every rank of the fabric. Anonymous mmap keeps untouched pages
// uncommitted, so large mailboxes of peers that never talk cost address space only. Device
// memory is reachable too: the ranks share one address space, so no CUDA IPC handle is needed.
struct Block {
  void* data = nullptr;
  size_t size = 0;
  bool owned = false;  // mmap'ed by allocate(kHost)
  MemoryKind kind = MemoryKind::kHost;
  std::optional<gpu::DeviceBuffer> device;  // allocate(kCuda)'s memory, freed with the block
  ~Block() {
    if (owned && data) munmap(data, size);
  }
};

// Per-rank receive side, owned by the fabric so that it outlives the endpoint.
struct Mailroom {
  explicit Mailroom(size_t capacity) : notes(capacity) {}
  BoundedQueue<Note> notes;
  EventCount event;
  std::atomic<bool> woken{false};
  // The owner's close(): peers' write() and notify() that start after it refuse. (One already
  // copying may finish: the memory stays alive while imported. No count of writers: that would
  // be two contended read-modify-writes on every write.)
  std::atomic<bool> closed{false};
};

class Fabric {
 public:
  Fabric(uint64_t id, int size, size_t queue_capacity) : id_(id) {
    rooms_.reserve(size);
    for (int i = 0; i < size; ++i) rooms_.push_back(std::make_unique<Mailroom>(queue_capacity));
  }
  uint64_t id() const { return id_; }
  int size() const { return static_cast<int>(rooms_.size()); }
  Mailroom& room(int rank) { return *rooms_[rank]; }

  uint64_t add_block(std::shared_ptr<Block> block) {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t bid = next_block_++;
    blocks_[bid] = std::move(block);
    return bid;
  }
  void remove_block(uint64_t bid) {
    std::lock_guard<std::mutex> lock(mu_);
    blocks_.erase(bid);
  }
  std::shared_ptr<Block> find_block(uint64_t bid) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(bid);
    return it == blocks_.end() ? nullptr : it->second;
  }

 private:
  const uint64_t id_;
  std::vector<std::unique_ptr<Mailroom>> rooms_;
  std::mutex mu_;  // guards the block table: registration and import only, never data
  uint64_t next_block_ = 1;
  std::map<uint64_t, std::shared_ptr<Block>> blocks_;
};

// Process-wide directory of fabrics, so ranks bootstrapped through a store find each other.
struct FabricDirectory {
  std::mutex mu;
  uint64_t next_id = 1;
  std::map<uint64_t, std::weak_ptr<Fabric>> fabrics;
};
FabricDirectory& directory() {
  static FabricDirectory d;
  return d;
}

class InprocRegion final : public MemoryRegion {
 public:
  InprocRegion(std::shared_ptr<Fabric> fabric, std::shared_ptr<Block> block, uint64_t bid,
               int owner, MemoryKind kind)
      : MemoryRegion(block->data, block->size, kind),
        fabric_(std::move(fabric)),
        block_(std::move(block)),
        bid_(bid) {
    // The key (inproc_key.h); `kind` must agree with the block it names, so a host key never
    // reaches device memory as if it were host memory, nor the reverse.
    remote_key_ =
        InprocKey{owner, fabric_->id(), bid, block_->size, static_cast<uint8_t>(kind)}.pack();
  }
  ~InprocRegion() override { fabric_->remove_block(bid_); }

 private:
  std::shared_ptr<Fabric> fabric_;
  std::shared_ptr<Block> block_;  // peers' imports share it
  uint64_t bid_;
};

class InprocRemote final : public RemoteRegion {
 public:
  InprocRemote(int peer, std::shared_ptr<Block> block)
      : RemoteRegion(peer, block->size), block_(std::move(block)) {}
  uint8_t* base() const { return static_cast<uint8_t*>(block_->data); }
  MemoryKind kind() const { return block_->kind; }

 private:
  std::shared_ptr<Block> block_;
};

class InprocTransport final : public Transport {
 public:
  InprocTransport(int rank, int size, std::shared_ptr<Fabric> fabric)
      : Transport(rank, size),
        fabric_(std::move(fabric)),
        room_(fabric_->room(rank)),
        contacts_(size) {}
  ~InprocTransport() override { close(); }

  std::string_view name() const override { return "inproc"; }

  // Stores through mapped_address() are the peers' own and cannot be stopped; everything that
  // goes through write() and notify() is.
  void close() override {
    if (closed_) return;
    closed_ = true;
    room_.closed.store(true, std::memory_order_release);
  }

  Result<std::unique_ptr<MemoryRegion>> allocate(size_t bytes, MemoryKind kind) override {
    EC_RETURN_IF_ERROR(check_kind(kind, "allocate"));
    auto block = std::make_shared<Block>();
    block->size = bytes;
    block->kind = kind;
    if (kind == MemoryKind::kCuda) {
      if (bytes > 0) {
        Result<gpu::DeviceBuffer> device = allocate_device_zeroed(bytes);
        if (!device.ok()) {
          Status s = device.status();
          s.prepend("inproc: allocate(" + std::to_string(bytes) + ", cuda): ");
          return s;
        }
        block->device.emplace(std::move(device).value());
        block->data = block->device->data();
      }
      cuda_used_ = true;
    } else if (bytes > 0) {
      void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) {
        EC_ERROR(kMem, "inproc: mmap of %zu bytes failed: %m", bytes);
        return make_status(StatusCode::kNoMemory, "inproc: cannot allocate %zu bytes", bytes);
      }
      block->data = p;
      block->owned = true;
    }
    const uint64_t bid = fabric_->add_block(block);
    return std::unique_ptr<MemoryRegion>(
        std::make_unique<InprocRegion>(fabric_, std::move(block), bid, rank(), kind));
  }

  Result<std::unique_ptr<MemoryRegion>> register_memory(void* data, size_t bytes,
                                                        MemoryKind kind) override {
    EC_RETURN_IF_ERROR(check_kind(kind, "register_memory"));
    if (data == nullptr && bytes > 0) {
      return make_status(StatusCode::kInvalidArgument,
                         "inproc: cannot register a null pointer with %zu bytes", bytes);
    }
    if (kind == MemoryKind::kCuda && bytes > 0) {
      EC_RETURN_IF_ERROR(check_device_range(data, bytes, "inproc: register_memory"));
      cuda_used_ = true;
    } else if (kind == MemoryKind::kHost && cuda_used_ && bytes > 0) {
      // A device pointer passed as host memory would fault in memcpy. Asked only once this
      // transport has device memory: the query initializes CUDA, which host-only programs on a
      // GPU machine should not pay for.
      EC_RETURN_IF_ERROR(gpu::check_buffer_kind(data, kind, "inproc: register_memory"));
    }
    auto block = std::make_shared<Block>();
    block->data = data;
    block->size = bytes;
    block->kind = kind;
    const uint64_t bid = fabric_->add_block(block);
    return std::unique_ptr<MemoryRegion>(
        std::make_unique<InprocRegion>(fabric_, std::move(block), bid, rank(), kind));
  }

  Result<std::unique_ptr<RemoteRegion>> import_region(int peer,
                                                      std::span<const uint8_t> key) override {
    EC_RETURN_IF_ERROR(check_peer(peer));
    EC_ASSIGN_OR_RETURN(const InprocKey k, InprocKey::unpack(key, peer, fabric_->id()));
    std::shared_ptr<Block> block = fabric_->find_block(k.block_id);
    if (!block || block->size != k.size) {
      return make_status(StatusCode::kProtocolError,
                         "inproc: remote key from rank %d names a region that does not exist",
                         peer);
    }
    if (k.kind != static_cast<uint8_t>(block->kind)) {
      return make_status(StatusCode::kProtocolError,
                         "inproc: remote key from rank %d says memory kind %u, but the region it "
                         "names is %s memory",
                         peer, k.kind, std::string(memory_kind_name(block->kind)).c_str());
    }
    return std::unique_ptr<RemoteRegion>(std::make_unique<InprocRemote>(peer, std::move(block)));
  }

  std::vector<uint8_t> local_address() const override { return inproc_address(rank()); }

  Status connect(int peer, std::span<const uint8_t> address) override {
    EC_RETURN_IF_ERROR(check_peer(peer));
    return inproc_check_address(address, peer);
  }

  Status write(const MemoryRegion& local, size_t local_offset, const RemoteRegion& remote,
               size_t remote_offset, size_t bytes, uint32_t tag, uint64_t cookie) override {
    const auto& dst = static_cast<const InprocRemote&>(remote);
    EC_RETURN_IF_ERROR(
        check_write_bounds("inproc", local, local_offset, remote, remote_offset, bytes));
    if (closed_) return Status(StatusCode::kAborted, "inproc: write: this transport was closed");
    if (peer_has_closed(remote.peer())) return peer_closed(remote.peer(), "write");
    if (!has_room(remote.peer())) return Status(StatusCode::kBusy, {});
    // Device memory on either side: cudaMemcpy (the pointer is valid here as it is).
    if (const Status copied = copy_for_write(
            dst.base() + remote_offset, dst.kind(),
            static_cast<const uint8_t*>(local.data()) + local_offset, local.kind(), bytes);
        !copied.ok()) {
      Status s = copied;
      s.prepend("inproc: write of " + std::to_string(bytes) + " bytes to rank " +
                std::to_string(remote.peer()) + ": ");
      return s;
    }
    EC_RETURN_IF_ERROR(deliver(remote.peer(), tag));
    done_.push(
        TransportCompletion{TransportCompletion::Kind::kWriteDone, remote.peer(), tag, cookie});
    return Status::Ok();
  }

  Status notify(int peer, uint32_t tag) override {
    EC_RETURN_IF_ERROR(check_peer(peer));
    if (closed_) return Status(StatusCode::kAborted, "inproc: notify: this transport was closed");
    if (peer_has_closed(peer)) return peer_closed(peer, "notify");
    return deliver(peer, tag);
  }

  // Null for device memory: callers load and store through this pointer, which the CPU cannot
  // do on device memory; they use write() instead.
  void* mapped_address(const RemoteRegion& remote) override {
    const auto& r = static_cast<const InprocRemote&>(remote);
    return r.kind() == MemoryKind::kHost ? r.base() : nullptr;
  }

  // True for host regions only (mapped_address() above).
  bool maps_peer_memory() const override { return true; }
  TransportCaps capabilities() const override {
    return {.ranks_on_one_host = true, .ranks_in_one_process = true, .connects_on_demand = true};
  }
  uint32_t connected_peers() const override { return contacts_.count(); }

  size_t poll(std::span<TransportCompletion> out) override {
    if (closed_) return 0;
    size_t n = done_.drain(out);
    Note note;
    while (n < out.size() && room_.notes.try_pop(note)) {
      contacts_.mark(note.peer);
      out[n++] = TransportCompletion{TransportCompletion::Kind::kNotify, note.peer, note.tag, 0};
    }
    return n;
  }

  void wait(std::chrono::nanoseconds timeout) override {
    if (room_.woken.exchange(false, std::memory_order_acq_rel)) return;
    const EventCount::Ticket ticket = room_.event.prepare_wait();
    if (room_.notes.size_approx() > 0 || done_.any() ||
        room_.woken.exchange(false, std::memory_order_acq_rel)) {
      room_.event.cancel_wait();
      return;
    }
    room_.event.commit_wait(ticket, timeout);
  }

  void wake() override {
    room_.woken.store(true, std::memory_order_release);
    room_.event.notify_all();
  }

  bool peer_left(int peer) const override {
    return peer >= 0 && peer < size() && peer != rank() && peer_has_closed(peer);
  }

  // As wake(), on the peer's room: its wait() takes `woken` after announcing itself.
  void wake_peer(int peer) override {
    if (peer < 0 || peer >= size() || peer == rank()) return;
    Mailroom& room = fabric_->room(peer);
    room.woken.store(true, std::memory_order_release);
    room.event.notify_all();
  }

 private:
  bool peer_has_closed(int peer) const {
    return fabric_->room(peer).closed.load(std::memory_order_acquire);
  }

  Status peer_closed(int peer, const char* call) const {
    return make_status(StatusCode::kPeerFailed, "inproc: %s: rank %d has closed its transport",
                       call, peer);
  }
  Status check_kind(MemoryKind kind, const char* call) const {
    if (kind == MemoryKind::kHost) return Status::Ok();
    if (kind != MemoryKind::kCuda) {
      return make_status(StatusCode::kInvalidArgument, "inproc: %s: unknown memory kind %u", call,
                         static_cast<unsigned>(kind));
    }
    const std::string who = std::string("inproc: ") + call;
    return cuda_memory_available(who.c_str());
  }
  Status check_peer(int peer) const {
    if (peer >= 0 && peer < size()) return Status::Ok();
    return make_status(StatusCode::kInvalidArgument, "inproc: peer rank %d out of range [0, %d)",
                       peer, size());
  }
  bool has_room(int peer) {
    Mailroom& r = fabric_->room(peer);
    return r.notes.size_approx() < r.notes.capacity();
  }
  Status deliver(int peer, uint32_t tag) {
    Mailroom& r = fabric_->room(peer);
    if (!r.notes.try_push(Note{rank(), tag})) return Status(StatusCode::kBusy, {});
    contacts_.mark(peer);
    r.event.notify_all();
    return Status::Ok();
  }

  std::shared_ptr<Fabric> fabric_;
  Mailroom& room_;
  LocalCompletions done_;   // local write completions not yet polled
  PeerContacts contacts_;   // peers written to or heard from (connected_peers())
  bool cuda_used_ = false;  // this transport holds device memory (so CUDA is initialized)
  bool closed_ = false;
};

}  // namespace

Result<std::unique_ptr<Transport>> create_inproc_transport(const TransportParams& params) {
  if (params.store == nullptr || params.config == nullptr) {
    return make_status(StatusCode::kInvalidArgument, "inproc: a store and a config are required");
  }
  const std::string key = params.scope + "/inproc/fabric";
  // Enough room for every peer's full mailbox of data and credits plus control traffic, so
  // kBusy only shows up under abuse.
  size_t capacity = 64;
  while (capacity < static_cast<size_t>(params.size) * params.config->slots * 4 + 256)
    capacity *= 2;

  std::shared_ptr<Fabric> fabric;
  if (params.rank == 0) {
    FabricDirectory& d = directory();
    {
      std::lock_guard<std::mutex> lock(d.mu);
      fabric = std::make_shared<Fabric>(d.next_id++, params.size, capacity);
      d.fabrics[fabric->id()] = fabric;
    }
    const std::string value = inproc_fabric_record({getpid(), fabric->id()});
    EC_RETURN_IF_ERROR(params.store->set(key, to_bytes(value)));
  } else {
    EC_ASSIGN_OR_RETURN(Bytes raw, params.store->get(key, params.config->timeout));
    const std::string value = to_string(raw);
    EC_ASSIGN_OR_RETURN(const InprocFabricRecord record, inproc_parse_fabric_record(value));
    const long pid = record.pid;
    const unsigned long long id = record.fabric_id;
    if (pid != getpid()) {
      return make_status(StatusCode::kUnavailable,
                         "inproc: rank 0 runs in process %ld, this rank in %ld; the inproc "
                         "transport needs every rank in one process (use shm or ucx)",
                         pid, static_cast<long>(getpid()));
    }
    FabricDirectory& d = directory();
    std::lock_guard<std::mutex> lock(d.mu);
    auto it = d.fabrics.find(id);
    if (it != d.fabrics.end()) fabric = it->second.lock();
    if (!fabric) {
      return make_status(StatusCode::kPeerFailed, "inproc: the fabric of rank 0 is gone");
    }
    if (fabric->size() != params.size) {
      return make_status(StatusCode::kMismatch,
                         "inproc: rank 0 was started with world size %d, rank %d with %d",
                         fabric->size(), params.rank, params.size);
    }
  }
  return std::unique_ptr<Transport>(
      std::make_unique<InprocTransport>(params.rank, params.size, std::move(fabric)));
}

}  // namespace eagercomm
