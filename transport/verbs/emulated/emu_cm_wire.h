// Internal: how the emulated rdma_cm's messages travel (emu_cm.h). Not installed.
//
// A CM message (REQ, REP, RTU, REJ, DREQ) is one trivially copyable CmWire. It goes into the
// shared-memory inbox of the receiving event channel, named after the channel's TCP port
// (/eagercomm-vemucm-<uid>-<port>), or, for a disconnect request, into the peer's port ring
// behind the data sent before it (emu_port.h). The channel's owner drains its inbox
// (emu_cm.cc); nothing here knows ids or channels.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "transport/verbs/emulated/emu_port.h"

namespace eagercomm::verbs::emu {

inline constexpr uint64_t kInboxMagic = 0x6563766d'636d0001ull;  // "ecvmcm" + layout 1
inline constexpr uint32_t kInboxSlots = 64;                      // power of two
inline constexpr uint32_t kMaxPrivate = 196;

enum class CmKind : uint32_t { kReq = 1, kRep, kRtu, kRej, kDreq };

// One CM message, as it sits in an inbox or in a port's packet (trivially copyable).
struct CmWire {
  CmKind kind;
  uint32_t src_port;  // the sender's channel
  uint32_t src_id;
  uint32_t dst_port;  // the receiver's channel
  uint32_t dst_id;    // 0: the channel's listener (a REQ)
  uint32_t qpn;
  uint32_t psn;
  uint8_t responder_resources;
  uint8_t initiator_depth;
  uint8_t retry_count;
  uint8_t rnr_retry_count;
  uint32_t private_len;
  uint8_t private_data[kMaxPrivate];
};
static_assert(sizeof(CmWire) <= kChunk);

struct InboxSlot {
  std::atomic<uint64_t> seq;
  CmWire msg;
};

struct Inbox {
  std::atomic<uint64_t> magic;
  int32_t pid;
  uint32_t port;
  alignas(64) std::atomic<uint64_t> tail;
  alignas(64) uint64_t head;  // the owner's
  InboxSlot ring[kInboxSlots];
};

// The shared-memory name of channel `port`'s inbox.
std::string inbox_name(uint32_t port);

// Creates the inbox of channel `port`, empty and ready for messages (an inbox of that name is a
// leftover of a dead process: the port is the caller's now). nullptr when it cannot.
Inbox* create_inbox(uint32_t port);
// Maps the inbox of channel `port`; nullptr when no channel has that port.
Inbox* attach_inbox(uint32_t port);
void unmap_inbox(Inbox* box);
// The owner's end: unlinks and unmaps its inbox.
void remove_inbox(uint32_t port, Inbox* box);

// Vyukov bounded queue, as the port's ring (emu_port.h). False when full.
bool inbox_push(Inbox& box, const CmWire& m);
// The owner's next message; false when there is none.
bool inbox_pop(Inbox& box, CmWire* out);

// Leaves `m` in the inbox of channel m.dst_port. False when there is none (or it stays full).
bool send_to_inbox(const CmWire& m);
// Leaves `m` in the ring of port `lid`, behind the data already sent to it.
bool send_through_port(uint32_t lid, const CmWire& m);

// Unlinks the inboxes left by killed processes (a destroyed channel removes its own).
void reclaim_dead_inboxes();

}  // namespace eagercomm::verbs::emu
