// The transport contract (docs/ARCHITECTURE.md, "The transport contract"): one-sided writes with
// remote notification.
//
// Every backend (inproc, shm, ucx, verbs) implements this small, non-blocking, poll-driven
// interface, the shape of NCCL's net plugin API and of libfabric's FI_RMA with remote CQ data:
//
//   - allocate() gives registered memory owned by the transport for the runtime's own buffers
//     (mailboxes, signals); register_memory() registers a user buffer. Both return a region
//     whose packed remote key a peer imports with import_region() to write into it.
//   - local_address() / connect(): address blobs are exchanged through the bootstrap store;
//     connect() never blocks. A backend that connects on demand (TransportCaps::
//     connects_on_demand) only records the address there and connects on the first write,
//     notify or import_region() towards the peer, and takes traffic from peers it has not
//     connected to itself: a rank of a large job then holds connections to the peers it talks
//     to, not to all (issue 21): shm, ucx, verbs over rdma_cm (the first sender is the active
//     side; the passive one makes its queue pair for the request), inproc and sim. Elsewhere (the
//     verbs store path) a peer may drop what arrives before it has called connect() for the
//     sender (a queue pair not yet ready to receive), so the first write or notify to a peer
//     waits until that peer has connected too: the bootstrap calls connect() for every peer on
//     every rank, then waits for every rank in the store before any traffic.
//   - write(): copies bytes from a local region into a peer's region, then delivers a 32-bit
//     notification tag that the peer sees in its own poll() only after the data is visible in
//     its memory. Writes and notifications from one rank to one peer are delivered in the order
//     they were issued (per-pair FIFO); nothing is promised across different senders.
//   - notify(): a notification with no data (ordered after earlier writes to that peer).
//   - mapped_address(): backends whose peers' memory is mapped into this process (inproc, shm)
//     may hand out a pointer to store into a remote region directly; a following notify()
//     publishes those stores (release). Others return nullptr and callers use write().
//   - poll() returns completions and never blocks; wait() blocks until poll() may have
//     something, wake() is called, or the timeout passes.
//
// Back-pressure: write() and notify() return kBusy when the transport cannot take more right
// now; nothing was delivered and the caller retries later (after poll()).
//
// Thread-safety: one thread at a time drives a Transport (the progress engine guarantees it),
// except wait() and wake(), which any thread may call at any time (the progress thread sleeps
// in wait() without being the driver).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "runtime/memory.h"
#include "runtime/status.h"

namespace eagercomm {

// Memory of this rank that peers can write into: transport-allocated or registered.
class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;
  void* data() const { return data_; }
  size_t size() const { return size_; }
  MemoryKind kind() const { return kind_; }
  // Packed remote key: what a peer passes to import_region() to reach this region.
  const std::vector<uint8_t>& remote_key() const { return remote_key_; }

 protected:
  MemoryRegion(void* data, size_t size, MemoryKind kind) : data_(data), size_(size), kind_(kind) {}
  void* data_;
  size_t size_;
  MemoryKind kind_;
  std::vector<uint8_t> remote_key_;
};

// A peer's region, imported from its packed remote key.
class RemoteRegion {
 public:
  virtual ~RemoteRegion() = default;
  int peer() const { return peer_; }
  size_t size() const { return size_; }

 protected:
  RemoteRegion(int peer, size_t size) : peer_(peer), size_(size) {}
  int peer_;
  size_t size_;
};

struct TransportCompletion {
  enum class Kind : uint8_t {
    kWriteDone,  // a local write finished: its source bytes may be reused (cookie says which)
    kNotify,     // a peer's notification arrived (peer, tag); its data is visible
    kPeerError,  // the transport lost the peer (why: the transport's peer_error(peer))
  };
  Kind kind;
  int peer;
  uint32_t tag;
  uint64_t cookie;
};

// `base` as the final class T, or null: a backend's check that a region is one of its own, at the
// cost of a comparison rather than a dynamic_cast's walk (write() does it twice per call).
template <typename T, typename Base>
const T* exactly(const Base& base) {
  static_assert(std::is_final_v<T>);
  return typeid(base) == typeid(T) ? static_cast<const T*>(&base) : nullptr;
}

// What a backend guarantees about where its ranks run, for decisions that would otherwise
// branch on backend names. The default promises nothing.
struct TransportCaps {
  // Every rank of the world runs on this host (inproc, shm): the world size is the number of
  // ranks that share this host's CPUs.
  bool ranks_on_one_host = false;
  // Every rank is a thread of this process (inproc): ranks cannot stop or hang one by one.
  bool ranks_in_one_process = false;
  // Writes of more bytes deliver only their first page (the sim backend timing sizes whose
  // buffers would not fit P times over): the values are never looked at, so the collectives
  // skip the reductions and copies of such payloads.
  uint64_t payloads_elided_above = UINT64_MAX;
  // connect() records the address; the connection is made on first use, from either side
  // (see the contract above). connected_peers() counts the connections made.
  bool connects_on_demand = false;
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual std::string_view name() const = 0;
  int rank() const { return rank_; }
  int size() const { return size_; }

  // Registered memory owned by the transport (zero-filled), for the runtime's own buffers.
  virtual Result<std::unique_ptr<MemoryRegion>> allocate(size_t bytes, MemoryKind kind) = 0;
  // Registers caller-owned memory; the caller keeps it alive longer than the region.
  virtual Result<std::unique_ptr<MemoryRegion>> register_memory(void* data, size_t bytes,
                                                                MemoryKind kind) = 0;
  // Unpacks a peer's remote key. The result keeps whatever the backend needs alive.
  virtual Result<std::unique_ptr<RemoteRegion>> import_region(int peer,
                                                              std::span<const uint8_t> key) = 0;

  virtual std::vector<uint8_t> local_address() const = 0;
  // Starts connecting to `peer`; never blocks. Idempotent.
  virtual Status connect(int peer, std::span<const uint8_t> address) = 0;

  // Writes `bytes` from local[local_offset..] to remote[remote_offset..], then notifies the
  // peer with `tag`. A kWriteDone completion with `cookie` follows when the source is reusable.
  virtual Status write(const MemoryRegion& local, size_t local_offset, const RemoteRegion& remote,
                       size_t remote_offset, size_t bytes, uint32_t tag, uint64_t cookie) = 0;
  virtual Status notify(int peer, uint32_t tag) = 0;
  virtual void* mapped_address(const RemoteRegion& remote) {
    (void)remote;
    return nullptr;
  }
  // True when mapped_address() works for every imported region, user buffers included: the
  // ranks share an address space (inproc), so collectives may load from and store to peers'
  // buffers directly instead of going through mailboxes.
  virtual bool maps_peer_memory() const { return false; }
  // True when mapped_address() works for every imported region made by allocate() (inproc,
  // shm): runtime-owned structures may then be shared by loads and stores alone.
  virtual bool maps_allocations() const { return maps_peer_memory(); }
  virtual TransportCaps capabilities() const { return {}; }
  // Peers this rank holds a connection to now (endpoints, queue pairs, mapped rings): what a
  // large job pays per rank. Called by the current driver.
  virtual uint32_t connected_peers() const = 0;

  // Fills `out` with up to out.size() completions; returns how many.
  virtual size_t poll(std::span<TransportCompletion> out) = 0;
  // Blocks until poll() may return something, wake() was called (now or since the last
  // wait()), or `timeout` passed. Spurious returns are allowed. Thread-safe.
  virtual void wait(std::chrono::nanoseconds timeout) = 0;
  virtual void wake() = 0;
  // Makes `peer`'s current or next wait() return, as a notification would, delivering nothing
  // (sticky, like wake()). For data that a peer finds by loads alone: stores through
  // mapped_address() come with no notification, so a peer asleep in wait() would otherwise
  // sleep on. Call it after the stores (they are then visible when the peer's wait() returns).
  // Only backends whose allocate() memory peers map (maps_allocations()) need it; the others
  // do nothing. Called by the current driver.
  virtual void wake_peer(int peer) { (void)peer; }
  // The runtime handed `bytes` of a received payload to the operation that reduces or copies it
  // (a message for an operation not started yet is handed over when it starts). Only the
  // simulated transport does something: it charges the rank's CPU the reduction then, not when
  // the message arrived, so a message stashed for a round not yet entered does not hold up what
  // the rank does first (entering the round and forwarding its activation). Called by the
  // current driver.
  virtual void took_in(size_t bytes) { (void)bytes; }
  // True once `peer` closed its transport (it left the job, see close()) and this rank has
  // learnt so: a write or notify to it then fails because it is gone, not because something broke,
  // which callers report as such (a normal shutdown is not an error). Called by the current driver.
  virtual bool peer_left(int peer) const {
    (void)peer;
    return false;
  }
  // Why the transport lost `peer` (kPeerFailed with the cause it saw first: "shm: rank 2's
  // process is gone (killed or crashed)", the verbs completion error, UCX's status), once it
  // reported a kPeerError completion for it; a backend that records no cause says only that the
  // peer was lost. Callers put it into the errors they return, so the cause reaches the
  // application; the backend already logged it (the first place that sees an error logs it).
  // Called by the current driver, after poll() returned the kPeerError.
  virtual Status peer_error(int peer) const {
    return make_status(StatusCode::kPeerFailed, "the %.*s transport recorded no cause for rank %d",
                       static_cast<int>(name().size()), name().data(), peer);
  }

  // Leaves the job: tells connected peers this rank is gone, finishes (or, at a bounded
  // deadline, abandons) what is in flight and stops serving peers' operations. Afterwards
  // write() and notify() fail and poll() returns nothing; regions stay valid until destroyed,
  // and no peer writes into them any more. Idempotent; destruction closes too. Communicators
  // close their transport before they free the regions peers could still be writing into.
  virtual void close() {}

 protected:
  Transport(int rank, int size) : rank_(rank), size_(size) {}

 private:
  int rank_;
  int size_;
};

}  // namespace eagercomm
