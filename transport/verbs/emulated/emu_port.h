// Internal: the emulated RDMA device's wire. Not installed.
//
// Every opened emulated device context owns one *port*: a shared-memory segment
// /eagercomm-vemu-<uid>-<lid> that any process of the same user on this host can map. The LID is
// the port's address on the emulated fabric (unique per host: the segment is created O_EXCL,
// from a random LID on, and its owner holds a shared flock on it for life; segments without an
// owner are unlinked when a port is created). A port holds what a real HCA keeps where a remote
// requester can reach it:
//   - the queue-pair table: per QP number its state (only RTR and RTS accept packets), the
//     receives posted and reserved (a WRITE_WITH_IMM reserves one before sending, or gets an
//     RNR NAK), and its min_rnr_timer;
//   - the memory-region table: per rkey the region's address, length and access flags, and the
//     address through which the device reaches its bytes (differs from the CPU's address for
//     emulated device memory, which the CPU cannot read);
//   - the inbound packet ring: a bounded multi-producer queue of packets of up to kChunk bytes
//     that the port's own device thread drains, placing data into regions and producing receive
//     completions; and a doorbell (a futex word) that producers ring.
//
// This is a test and development aid with the timing semantics of a NIC (asynchronous
// completion, ordered delivery per QP, retries, RNR, access errors), not a fast path.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/status.h"

namespace eagercomm::verbs::emu {

inline constexpr uint32_t kChunk = 16 * 1024;  // payload bytes per packet
inline constexpr uint32_t kRingSlots = 256;    // power of two
inline constexpr uint32_t kMaxQps = 1024;
inline constexpr uint32_t kMaxMrs = 4096;
inline constexpr uint32_t kMaxLid = 4096;

enum class PacketKind : uint32_t { kWrite = 1, kCm = 2 };  // kCm: an rdma_cm message (emu_cm.h)
inline constexpr uint32_t kPacketLast = 1;                 // the last packet of a write
inline constexpr uint32_t kPacketWithImm = 2;  // the write carries an immediate (last packet)

struct Packet {
  std::atomic<uint64_t> seq;  // Vyukov bounded-queue sequence
  PacketKind kind;
  uint32_t flags;
  uint32_t src_lid;
  uint32_t src_qpn;
  uint32_t dst_qpn;
  uint32_t rkey;
  uint32_t imm;    // network byte order, as posted
  uint32_t len;    // bytes in data[]
  uint32_t total;  // the whole write's length (last packet: the receive's byte_len)
  uint32_t pad;
  uint64_t addr;  // remote virtual address of data[0]
  uint8_t data[kChunk];
};

// QP states as in ibv_qp_state; kFree: the slot holds no QP.
inline constexpr uint32_t kQpFree = 0xffffffffu;

struct QpSlot {
  std::atomic<uint32_t> state;
  // The requester this QP is connected to (set at RTR): packets from any other QP are dropped,
  // as a responder drops what does not belong to its connection. A port's LID and QP numbers
  // are reused after it closes, and a peer's QP still connected to the old port must not reach
  // the new one.
  std::atomic<uint32_t> peer_lid;
  std::atomic<uint32_t> peer_qpn;
  std::atomic<uint32_t> recv_posted;    // receives posted (wrapping counter)
  std::atomic<uint32_t> recv_reserved;  // receives claimed by requesters (wrapping counter)
  std::atomic<uint32_t> min_rnr_timer;  // the IB encoding (ibv_qp_attr::min_rnr_timer)
};

struct MrSlot {
  std::atomic<uint32_t> rkey;  // 0: free
  uint32_t access;
  uint64_t addr;  // the CPU's (and the peers') view of the region
  uint64_t length;
  uint64_t device;  // where the emulated device reads and writes addr's bytes (this process)
};

struct PortShared {
  uint64_t magic;
  uint32_t version;
  int32_t pid;
  uint32_t lid;
  uint32_t pad;
  alignas(64) std::atomic<uint32_t> doorbell;  // futex word: bumped by every producer
  std::atomic<uint32_t> sleeping;              // the device thread waits on the doorbell
  alignas(64) std::atomic<uint64_t> tail;      // producers' claim index
  alignas(64) uint64_t head;                   // the consumer's index (its process only)
  QpSlot qps[kMaxQps];
  MrSlot mrs[kMaxMrs];
  alignas(64) Packet ring[kRingSlots];
};

// One mapped port: this process's own (owner) or a peer's.
class Port {
 public:
  // Creates a port with a fresh LID, owned by this process.
  static Result<std::unique_ptr<Port>> create();
  // Maps the live port with this LID (kUnavailable when none, or its owner died).
  static Result<std::unique_ptr<Port>> attach(uint32_t lid);
  ~Port();

  uint32_t lid() const { return lid_; }
  PortShared& shared() const { return *shared_; }
  bool owner() const { return owner_; }
  // Whether the process that owns the port still runs.
  bool alive() const;

  // Producer side (any process): claims a slot and fills it through `fill`, then publishes.
  // False when the ring is full (retry later). `fill` must not touch `seq`.
  template <typename Fill>
  bool push(Fill&& fill);
  void ring_doorbell();

  // Consumer side (the owner's device thread): the next packet, or nullptr; release() it after.
  Packet* peek();
  void release();

 private:
  enum class Role : uint8_t { kOwner, kPeer };  // this process's own port, or a peer's
  Port(PortShared* shared, uint32_t lid, Role role, std::string name, int owner_fd);
  PortShared* shared_;
  uint32_t lid_;
  bool owner_;
  std::string name_;
  int owner_fd_;  // the owner's: holds the shared flock that says the port is alive
};

template <typename Fill>
bool Port::push(Fill&& fill) {
  PortShared& s = *shared_;
  uint64_t pos = s.tail.load(std::memory_order_relaxed);
  for (;;) {
    Packet& p = s.ring[pos & (kRingSlots - 1)];
    const uint64_t seq = p.seq.load(std::memory_order_acquire);
    const int64_t diff = static_cast<int64_t>(seq) - static_cast<int64_t>(pos);
    if (diff == 0) {
      if (s.tail.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
        fill(p);
        p.seq.store(pos + 1, std::memory_order_release);
        return true;
      }
    } else if (diff < 0) {
      return false;  // full
    } else {
      pos = s.tail.load(std::memory_order_relaxed);
    }
  }
}

// The segment name of `lid` for this user.
std::string port_name(uint32_t lid);

}  // namespace eagercomm::verbs::emu
