// Slotted mailboxes with credit-based flow control, built on the transport contract.
//
// One-sided writes need a place to land that the receiver has set aside and a way for the
// sender to know when it may reuse it. Every rank allocates one inbox region (transport
// memory) holding slots for each peer, as many and as large as the layout gives that peer
// (mailbox_layout.h; by default `slots` slots of `slot_bytes` for every peer); peers import its
// key at bootstrap. A send fills a slot of the peer's inbox (directly, through mapped memory, when
// the transport offers it and EAGERCOMM_DIRECT is on; otherwise in a local staging slot that is
// then written) and notifies the peer with a tag naming the slot. The receiver hands the
// message to its consumer, which releases it when done; the release returns a credit.
//
// Slot layout: a 16-byte mailbox header (magic, payload bytes, per-pair sequence), a 48-byte
// header owned by the layer above (collectives put the operation key and signature there),
// then the payload.
//
// Liveness: a receiver may hold messages while it waits for other events (a ring step holds
// its input until the next peer has a free slot). If it would hold every slot of one sender,
// the oldest held message is copied out ("spilled") and its credit returned, so a sender is
// never blocked forever by a receiver that waits on something else. Spills cost a copy and are
// counted in stats().spills; the collectives are written so they do not happen in steady state.
//
// Not thread-safe: driven by the progress engine's current driver only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "runtime/status.h"
#include "transport/mailbox_layout.h"
#include "transport/transport.h"

namespace eagercomm {

inline constexpr size_t kMailboxHeaderBytes = 16;
inline constexpr size_t kUserHeaderBytes = 48;
inline constexpr size_t kSlotHeaderBytes = kMailboxHeaderBytes + kUserHeaderBytes;
inline constexpr uint32_t kMaxSlots = 64;

struct MailboxOptions {
  size_t slot_bytes = 256 * 1024;
  uint32_t slots = 8;
  bool direct = true;
};

// A message that arrived, held until release().
struct InMessage {
  int peer = -1;
  uint32_t slot = 0;
  uint32_t seq = 0;
  const uint8_t* user_header = nullptr;  // kUserHeaderBytes bytes
  const uint8_t* payload = nullptr;
  size_t payload_bytes = 0;
  bool spilled = false;
  std::vector<uint8_t> spill;  // header + payload once copied out of the slot
};

// A free slot of a peer's inbox (or its local staging copy) that the caller fills.
struct SendSlot {
  int peer = -1;
  uint32_t slot = 0;
  uint8_t* user_header = nullptr;  // kUserHeaderBytes bytes to fill
  uint8_t* payload = nullptr;      // up to payload_capacity() bytes
};

struct MailboxEvent {
  enum class Kind : uint8_t { kNone, kMessage, kControl, kError };
  Kind kind = Kind::kNone;
  InMessage* message = nullptr;  // kMessage
  int peer = -1;                 // kControl, kError
  uint32_t control = 0;          // kControl: 28 bits
  Status error;                  // kError: a peer broke the protocol or the transport failed
};

struct MailboxStats {
  uint64_t sent = 0;
  uint64_t received = 0;
  uint64_t spills = 0;
  uint64_t deferred = 0;  // sends retried after kBusy
  // Registered memory: the inbox, plus the staging copy once a peer cannot be stored to directly.
  uint64_t registered_bytes = 0;
  uint32_t connected_peers = 0;  // peers whose inbox this rank imported
  // Peers with slots of the layout's data shape (the others take headers and short texts).
  uint32_t data_peers = 0;
};

class Mailbox {
 public:
  // Every peer gets `options.slots` slots of `options.slot_bytes`, or what `layout` gives it
  // (then options' sizes are unused; the layout's data shape is what payload_capacity() says).
  static Result<std::unique_ptr<Mailbox>> create(Transport& transport,
                                                 const MailboxOptions& options,
                                                 std::unique_ptr<MailboxLayout> layout = nullptr);
  ~Mailbox();
  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;

  // Packed remote key of this rank's inbox, to publish for the peers.
  const std::vector<uint8_t>& inbox_key() const;
  // Imports `peer`'s inbox key now (once, at bootstrap).
  Status connect_peer(int peer, std::span<const uint8_t> inbox_key);
  // Records `peer`'s inbox key; the inbox is imported when this rank first sends it a message
  // (try_acquire), so that a rank imports, and its transport connects, only the peers it sends
  // data to. A failed import makes try_acquire() answer false and is reported once by
  // take_failure().
  Status know_peer(int peer, std::span<const uint8_t> inbox_key);
  // A peer whose inbox could not be imported on first use: kError with the peer and the cause
  // (kPeerFailed when it is gone). False when there is none.
  bool take_failure(MailboxEvent* out);
  bool has_failures() const { return !failures_.empty(); }
  // True once importing `peer`'s inbox on first use failed: messages for it cannot go.
  bool unreachable(int peer) const { return peers_[peer].import_failed; }
  // Whether this rank has sent `peer` a message or received one from it: a peer that may be
  // waiting for this rank's messages, or holding its slots.
  bool talked_to(int peer) const {
    return peers_[peer].remote != nullptr || peers_[peer].recv_seq != 0;
  }

  // The largest payload of a data peer's slot; payload_capacity(peer) for one peer's (smaller
  // where the layout gives the peer control slots only). A send of more fails.
  size_t payload_capacity() const { return slot_bytes_ - kSlotHeaderBytes; }
  size_t payload_capacity(int peer) const { return peers_[peer].slot_bytes - kSlotHeaderBytes; }
  // Slots towards `peer`.
  uint32_t slots(int peer) const { return peers_[peer].slots; }
  const MailboxLayout& layout() const { return *layout_; }
  bool direct() const { return direct_; }

  // A free slot of `peer`'s inbox, or false when every slot is in use (no credit).
  bool try_acquire(int peer, SendSlot* out);
  // Free slots towards `peer` right now.
  uint32_t credits(int peer) const;
  // Publishes a filled slot with `payload_bytes` of payload. Never fails for back-pressure
  // (kBusy is queued and retried by flush()); errors are transport failures.
  Status send(const SendSlot& slot, size_t payload_bytes);
  // A notification with no slot (peer exit and the like): `code` < 2^28. Queued on
  // back-pressure.
  Status send_control(int peer, uint32_t code);

  // Interprets one transport completion. Credits and write completions are absorbed
  // (kind kNone); arrived messages and control codes are returned.
  MailboxEvent on_completion(const TransportCompletion& c);
  // Done with a message: its slot goes back to the sender, at once when half of that sender's
  // slots are due, else at the next return_due_credits().
  void release(InMessage* message);
  // Retries sends deferred by back-pressure. Returns true when something was sent.
  bool flush();
  // True while sends wait for room at a peer (flush() must be called again).
  bool has_deferred() const { return !deferred_peers_.empty(); }
  // The same for sends to `peer` alone: true while it is not taking what it is sent.
  bool has_deferred(int peer) const {
    return peers_[peer].deferred_head != peers_[peer].deferred.size();
  }
  // Sends the credits that release() kept back; true if it sent any. The engine calls it when
  // a progress pass found nothing else to do, so credits leave off the critical path of the
  // operation that released them.
  bool return_due_credits();

  const MailboxStats& stats() const { return stats_; }

 private:
  struct Pending {
    enum class Kind : uint8_t { kNotify, kWrite } kind;
    uint32_t tag;
    uint32_t slot;
    size_t bytes;
  };
  struct Peer {
    uint32_t slots = 0;  // this pair's shape (the layout's, the same both ways)
    size_t slot_bytes = 0;
    size_t inbox_offset = 0;  // its slots in this rank's inbox (and in the staging copy)
    std::unique_ptr<RemoteRegion> remote;
    std::vector<uint8_t> key;  // know_peer(): imported on first use
    bool import_failed = false;
    uint8_t* mapped = nullptr;  // our slots in the peer's inbox, when stored to directly
    size_t remote_offset = 0;   // where our slots start in the peer's inbox
    uint64_t free_mask = 0;     // slots we may fill
    uint64_t writing_mask = 0;  // staging slots whose write is not complete yet
    uint32_t send_seq = 0;
    uint32_t recv_seq = 0;
    std::vector<InMessage*> held;  // by slot index: messages not yet released
    uint32_t held_count = 0;
    uint64_t credits_due = 0;    // released slots whose credit is not sent yet
    bool credit_listed = false;  // in credit_peers_
    // Sends waiting for room, oldest first: a vector and a head, which allocate nothing until
    // used (a std::deque allocates when made, for every peer of a large job).
    std::vector<Pending> deferred;
    size_t deferred_head = 0;
  };

  Mailbox(Transport& transport, const MailboxOptions& options,
          std::unique_ptr<MailboxLayout> layout);
  uint8_t* inbox_slot(int sender, uint32_t slot) const;
  uint8_t* staging_slot(int peer, uint32_t slot) const;
  Status import(int peer, std::span<const uint8_t> inbox_key);
  Status issue(int peer, const Pending& p);
  Status post(int peer, const Pending& p);
  void return_credit(int peer, uint32_t slot);
  void send_due_credits(int peer);
  void spill_oldest(int peer);
  InMessage* new_message();

  Transport& transport_;
  std::unique_ptr<MailboxLayout> layout_;
  const size_t slot_bytes_;  // the layout's data shape
  bool direct_;
  // Peers with deferred sends and with credits due: the passes over them touch only those,
  // not every rank of a large job.
  std::vector<int> deferred_peers_;
  std::vector<int> credit_peers_;
  std::unique_ptr<MemoryRegion> inbox_;
  std::unique_ptr<MemoryRegion> staging_;  // only when some peer is not stored to directly
  std::vector<Peer> peers_;
  std::vector<std::unique_ptr<InMessage>> messages_;  // every message object ever made
  std::vector<InMessage*> free_messages_;
  std::vector<MailboxEvent> failures_;  // imports on first use that failed, not yet taken
  MailboxStats stats_;
};

// Tag layout (32 bits): kind in bits 31..28; for data and credits the slot in bits 27..20 and
// the low 20 bits of the per-pair sequence in bits 19..0; for control a 28-bit code.
namespace mailbox_tag {
inline constexpr uint32_t kData = 1, kCredit = 2, kControl = 3;
inline uint32_t make(uint32_t kind, uint32_t slot, uint32_t low) {
  return (kind << 28) | ((slot & 0xffu) << 20) | (low & 0xfffffu);
}
inline uint32_t kind(uint32_t tag) { return tag >> 28; }
inline uint32_t slot(uint32_t tag) { return (tag >> 20) & 0xffu; }
inline uint32_t low(uint32_t tag) { return tag & 0xfffffu; }
}  // namespace mailbox_tag

}  // namespace eagercomm
