#include "transport/mailbox.h"

#include <bit>
#include <cstring>

#include "transport/transport_log.h"

namespace eagercomm {
namespace {

constexpr uint32_t kSlotMagic = 0x3142414d;  // "MAB1"
// Payload cache lines prefetched when a message arrives (small messages: all of it).
constexpr size_t kPrefetchLines = 4;

struct MailboxHeader {
  uint32_t magic;
  uint32_t payload_bytes;
  uint32_t seq;
  uint32_t reserved;
};
static_assert(sizeof(MailboxHeader) == kMailboxHeaderBytes);

uint64_t all_slots_mask(uint32_t slots) {
  return slots >= 64 ? ~uint64_t{0} : (uint64_t{1} << slots) - 1;
}

Status check_shape(const SlotShape& shape, const char* what) {
  if (shape.slots < 2 || shape.slots > kMaxSlots) {
    return make_status(StatusCode::kInvalidArgument, "mailbox: %u slots %s (accepted 2..%u)",
                       shape.slots, what, kMaxSlots);
  }
  if (shape.slot_bytes < kSlotHeaderBytes + 64 || shape.slot_bytes % 64 != 0) {
    return make_status(StatusCode::kInvalidArgument,
                       "mailbox: slot of %zu bytes %s (needs a multiple of 64, at least %zu)",
                       shape.slot_bytes, what, kSlotHeaderBytes + 64);
  }
  return Status::Ok();
}

}  // namespace

Mailbox::Mailbox(Transport& transport, const MailboxOptions& options,
                 std::unique_ptr<MailboxLayout> layout)
    : transport_(transport),
      layout_(std::move(layout)),
      slot_bytes_(layout_->data_shape().slot_bytes),
      direct_(options.direct),
      peers_(transport.size()) {}

Mailbox::~Mailbox() = default;

Result<std::unique_ptr<Mailbox>> Mailbox::create(Transport& transport,
                                                 const MailboxOptions& options,
                                                 std::unique_ptr<MailboxLayout> layout) {
  if (!layout) {
    EC_RETURN_IF_ERROR(check_shape(SlotShape{options.slots, options.slot_bytes}, "per peer"));
    layout = uniform_mailbox_layout(transport.size(), {options.slots, options.slot_bytes});
  }
  if (layout->size() != transport.size()) {
    return make_status(StatusCode::kInvalidArgument,
                       "mailbox: a layout of %d ranks for a transport of %d", layout->size(),
                       transport.size());
  }
  EC_RETURN_IF_ERROR(check_shape(layout->data_shape(), "per data peer"));
  std::unique_ptr<Mailbox> box(new Mailbox(transport, options, std::move(layout)));
  const int me = transport.rank();
  const MailboxLayout& lay = *box->layout_;
  for (int peer = 0; peer < transport.size(); ++peer) {
    if (peer == me) continue;
    Peer& p = box->peers_[peer];
    const SlotShape shape = lay.shape(me, peer);
    if (shape.slot_bytes > lay.data_shape().slot_bytes) {
      return make_status(StatusCode::kInvalidArgument,
                         "mailbox: rank %d's slots (%zu bytes) exceed the layout's data shape",
                         peer, shape.slot_bytes);
    }
    EC_RETURN_IF_ERROR(check_shape(shape, "for a peer"));
    p.slots = shape.slots;
    p.slot_bytes = shape.slot_bytes;
    p.inbox_offset = lay.offset(me, peer);
    p.free_mask = all_slots_mask(p.slots);
    p.held.assign(p.slots, nullptr);
    if (shape.slot_bytes == lay.data_shape().slot_bytes) ++box->stats_.data_peers;
  }
  const uint64_t bytes = mailbox_registered_bytes(lay, me, false);
  EC_ASSIGN_OR_RETURN(box->inbox_, transport.allocate(bytes, MemoryKind::kHost));
  box->stats_.registered_bytes = bytes;
  return box;
}

const std::vector<uint8_t>& Mailbox::inbox_key() const { return inbox_->remote_key(); }

uint8_t* Mailbox::inbox_slot(int sender, uint32_t slot) const {
  const Peer& p = peers_[sender];
  return static_cast<uint8_t*>(inbox_->data()) + p.inbox_offset + slot * p.slot_bytes;
}

// The staging copy has the inbox's layout: what this rank keeps for a peer is the shape of its
// slots there (the layout is symmetric).
uint8_t* Mailbox::staging_slot(int peer, uint32_t slot) const {
  const Peer& p = peers_[peer];
  return static_cast<uint8_t*>(staging_->data()) + p.inbox_offset + slot * p.slot_bytes;
}

Status Mailbox::connect_peer(int peer, std::span<const uint8_t> inbox_key) {
  if (peer < 0 || peer >= transport_.size() || peer == transport_.rank()) {
    return make_status(StatusCode::kInvalidArgument, "mailbox: peer %d out of range", peer);
  }
  return import(peer, inbox_key);
}

Status Mailbox::know_peer(int peer, std::span<const uint8_t> inbox_key) {
  if (peer < 0 || peer >= transport_.size() || peer == transport_.rank()) {
    return make_status(StatusCode::kInvalidArgument, "mailbox: peer %d out of range", peer);
  }
  if (inbox_key.empty()) {
    return make_status(StatusCode::kInvalidArgument, "mailbox: an empty inbox key for rank %d",
                       peer);
  }
  peers_[peer].key.assign(inbox_key.begin(), inbox_key.end());
  return Status::Ok();
}

bool Mailbox::take_failure(MailboxEvent* out) {
  if (failures_.empty()) return false;
  *out = std::move(failures_.back());
  failures_.pop_back();
  return true;
}

Status Mailbox::import(int peer, std::span<const uint8_t> inbox_key) {
  Peer& p = peers_[peer];
  if (p.remote) return Status::Ok();
  EC_ASSIGN_OR_RETURN(p.remote, transport_.import_region(peer, inbox_key));
  const size_t need = layout_->inbox_bytes(peer);
  if (const size_t has = p.remote->size(); has != need) {
    p.remote.reset();
    return make_status(StatusCode::kMismatch,
                       "mailbox: rank %d's inbox has %zu bytes, this rank expects %zu (do the "
                       "ranks use the same EAGERCOMM_SLOTS and EAGERCOMM_SLOT_BYTES?)",
                       peer, has, need);
  }
  p.remote_offset = layout_->offset(peer, transport_.rank());
  uint8_t* mapped = direct_ ? static_cast<uint8_t*>(transport_.mapped_address(*p.remote)) : nullptr;
  if (mapped) {
    p.mapped = mapped + p.remote_offset;
  } else if (!staging_) {
    const uint64_t bytes = mailbox_registered_bytes(*layout_, transport_.rank(), false);
    EC_ASSIGN_OR_RETURN(staging_, transport_.allocate(bytes, MemoryKind::kHost));
    stats_.registered_bytes += bytes;
  }
  ++stats_.connected_peers;
  return Status::Ok();
}

bool Mailbox::try_acquire(int peer, SendSlot* out) {
  Peer& p = peers_[peer];
  const uint64_t usable = p.free_mask & ~p.writing_mask;
  if (usable == 0) return false;
  if (!p.remote) [[unlikely]] {
    if (p.import_failed) return false;
    Status s = p.key.empty() ? make_status(StatusCode::kInvalidArgument,
                                           "mailbox: no inbox key of rank %d (not a peer "
                                           "this rank was given)",
                                           peer)
                             : import(peer, p.key);
    if (!s.ok()) {
      p.import_failed = true;
      EC_DEBUG(kNet, "mailbox: connecting to rank %d on first use failed: %s", peer,
               s.to_string().c_str());
      // The key was good at bootstrap: an inbox that cannot be imported now belongs to a peer
      // that left or died since, unless it is of another shape (settings that differ).
      const bool shape =
          s.code() == StatusCode::kMismatch || s.code() == StatusCode::kProtocolError;
      MailboxEvent e;
      e.kind = MailboxEvent::Kind::kError;
      e.peer = peer;
      e.error = s.code() == StatusCode::kPeerFailed
                    ? s
                    : make_status(shape ? s.code() : StatusCode::kPeerFailed,
                                  "mailbox: rank %d cannot be reached (%s): %s", peer,
                                  transport_.peer_left(peer) ? "it left the job"
                                                             : "its inbox cannot be imported",
                                  s.message().c_str());
      failures_.push_back(std::move(e));
      return false;
    }
    p.key = {};
  }
  const uint32_t slot = static_cast<uint32_t>(__builtin_ctzll(usable));
  p.free_mask &= ~(uint64_t{1} << slot);
  uint8_t* base =
      p.mapped ? p.mapped + static_cast<size_t>(slot) * p.slot_bytes : staging_slot(peer, slot);
  out->peer = peer;
  out->slot = slot;
  out->user_header = base + kMailboxHeaderBytes;
  out->payload = base + kSlotHeaderBytes;
  return true;
}

uint32_t Mailbox::credits(int peer) const {
  const Peer& p = peers_[peer];
  return static_cast<uint32_t>(__builtin_popcountll(p.free_mask & ~p.writing_mask));
}

Status Mailbox::send(const SendSlot& slot, size_t payload_bytes) {
  Peer& p = peers_[slot.peer];
  if (payload_bytes > p.slot_bytes - kSlotHeaderBytes) {
    // A caller that chose a peer the layout gives no data slots: refused before anything is
    // written past the slot. The slot goes back.
    p.free_mask |= uint64_t{1} << slot.slot;
    return make_status(StatusCode::kInternal,
                       "mailbox: %zu bytes for rank %d, whose slots take %zu (the layout gives it "
                       "%s slots)",
                       payload_bytes, slot.peer, p.slot_bytes - kSlotHeaderBytes,
                       p.slot_bytes == slot_bytes_ ? "data" : "control");
  }
  const uint32_t seq = p.send_seq++;
  MailboxHeader h{kSlotMagic, static_cast<uint32_t>(payload_bytes), seq, 0};
  uint8_t* base = slot.user_header - kMailboxHeaderBytes;
  std::memcpy(base, &h, sizeof(h));
  ++stats_.sent;
  const uint32_t tag = mailbox_tag::make(mailbox_tag::kData, slot.slot, seq);
  if (p.mapped) return post(slot.peer, Pending{Pending::Kind::kNotify, tag, slot.slot, 0});
  p.writing_mask |= uint64_t{1} << slot.slot;
  return post(slot.peer,
              Pending{Pending::Kind::kWrite, tag, slot.slot, kSlotHeaderBytes + payload_bytes});
}

Status Mailbox::send_control(int peer, uint32_t code) {
  if (code >> 28) {
    return make_status(StatusCode::kInvalidArgument, "mailbox: control code 0x%x too wide", code);
  }
  return post(peer, Pending{Pending::Kind::kNotify, (mailbox_tag::kControl << 28) | code, 0, 0});
}

Status Mailbox::issue(int peer, const Pending& pending) {
  if (pending.kind == Pending::Kind::kNotify) return transport_.notify(peer, pending.tag);
  Peer& p = peers_[peer];
  const size_t local_off = p.inbox_offset + static_cast<size_t>(pending.slot) * p.slot_bytes;
  const size_t remote_off = p.remote_offset + static_cast<size_t>(pending.slot) * p.slot_bytes;
  const uint64_t cookie = (static_cast<uint64_t>(peer) << 8) | pending.slot;
  return transport_.write(*staging_, local_off, *p.remote, remote_off, pending.bytes, pending.tag,
                          cookie);
}

// Sends now, or queues behind earlier deferred sends to the same peer so that the per-pair
// order the receiver checks is kept.
Status Mailbox::post(int peer, const Pending& pending) {
  Peer& p = peers_[peer];
  if (!has_deferred(peer)) {
    Status s = issue(peer, pending);
    if (s.code() != StatusCode::kBusy) return s;
  }
  if (!has_deferred(peer)) deferred_peers_.push_back(peer);
  p.deferred.push_back(pending);
  ++stats_.deferred;
  return Status::Ok();
}

bool Mailbox::flush() {
  bool any = false;
  for (size_t i = 0; i < deferred_peers_.size();) {
    const int peer = deferred_peers_[i];
    Peer& p = peers_[peer];
    while (has_deferred(peer)) {
      Status s = issue(peer, p.deferred[p.deferred_head]);
      if (s.code() == StatusCode::kBusy) break;
      if (!s.ok())
        EC_WARN(kNet, "mailbox: deferred send to rank %d failed: %s", peer, s.to_string().c_str());
      ++p.deferred_head;
      any = true;
    }
    if (!has_deferred(peer)) {
      p.deferred.clear();
      p.deferred_head = 0;
      deferred_peers_[i] = deferred_peers_.back();
      deferred_peers_.pop_back();
    } else {
      ++i;
    }
  }
  return any;
}

void Mailbox::return_credit(int peer, uint32_t slot) {
  Status s = post(peer, Pending{Pending::Kind::kNotify,
                                mailbox_tag::make(mailbox_tag::kCredit, slot, 0), slot, 0});
  if (s.ok()) return;
  // A peer that left takes no credits any more: nothing was lost (a normal shutdown).
  if (transport_.peer_left(peer)) {
    EC_DEBUG(kNet, "mailbox: no credit to rank %d, which left: %s", peer, s.to_string().c_str());
  } else {
    EC_WARN(kNet, "mailbox: credit to rank %d failed: %s", peer, s.to_string().c_str());
  }
}

void Mailbox::send_due_credits(int peer) {
  Peer& p = peers_[peer];
  while (p.credits_due != 0) {
    const uint32_t slot = static_cast<uint32_t>(std::countr_zero(p.credits_due));
    p.credits_due &= p.credits_due - 1;
    return_credit(peer, slot);
  }
}

bool Mailbox::return_due_credits() {
  if (credit_peers_.empty()) return false;
  for (const int peer : credit_peers_) {
    peers_[peer].credit_listed = false;
    send_due_credits(peer);
  }
  credit_peers_.clear();
  return true;
}

InMessage* Mailbox::new_message() {
  if (free_messages_.empty()) {
    messages_.push_back(std::make_unique<InMessage>());
    return messages_.back().get();
  }
  InMessage* m = free_messages_.back();
  free_messages_.pop_back();
  return m;
}

MailboxEvent Mailbox::on_completion(const TransportCompletion& c) {
  MailboxEvent ev;
  const int peer = c.peer;
  if (peer < 0 || peer >= static_cast<int>(peers_.size())) {
    ev.kind = MailboxEvent::Kind::kError;
    ev.error = make_status(StatusCode::kProtocolError, "mailbox: completion from rank %d", peer);
    return ev;
  }
  Peer& p = peers_[peer];
  if (c.kind == TransportCompletion::Kind::kWriteDone) {
    // The cookie is this mailbox's own (slot < the peer's slots <= 64); a transport that hands back
    // anything else must not make the shift undefined.
    const uint64_t slot = c.cookie & 0xff;
    if (slot < p.slots) p.writing_mask &= ~(uint64_t{1} << slot);
    return ev;
  }
  if (c.kind == TransportCompletion::Kind::kPeerError) {
    ev.kind = MailboxEvent::Kind::kError;
    ev.peer = peer;
    ev.error = make_status(StatusCode::kPeerFailed, "transport lost rank %d: %s", peer,
                           transport_.peer_error(peer).message().c_str());
    return ev;
  }
  const uint32_t kind = mailbox_tag::kind(c.tag);
  const uint32_t slot = mailbox_tag::slot(c.tag);
  auto protocol_error = [&](const char* what) {
    MailboxEvent e;
    e.kind = MailboxEvent::Kind::kError;
    e.peer = peer;
    e.error = make_status(StatusCode::kProtocolError, "mailbox: rank %d sent %s (tag 0x%08x)", peer,
                          what, c.tag);
    EC_ERROR(kNet, "%s", e.error.message().c_str());
    return e;
  };
  if (kind == mailbox_tag::kControl) {
    ev.kind = MailboxEvent::Kind::kControl;
    ev.peer = peer;
    ev.control = c.tag & 0x0fffffffu;
    return ev;
  }
  if (slot >= p.slots) return protocol_error("a slot index out of range");
  if (kind == mailbox_tag::kCredit) {
    const uint64_t bit = uint64_t{1} << slot;
    if (p.free_mask & bit) return protocol_error("a credit for a slot that was free");
    p.free_mask |= bit;
    return ev;
  }
  if (kind != mailbox_tag::kData) return protocol_error("an unknown tag kind");
  if (p.held[slot] != nullptr) return protocol_error("data into a slot still held");
  const uint8_t* base = inbox_slot(peer, slot);
  // The payload's first lines are fetched alongside the header instead of after it: with a
  // peer's stores, each line is a cache miss, and the header and payload lines are independent.
  for (size_t line = 0; line < kPrefetchLines; ++line) {
    __builtin_prefetch(base + kSlotHeaderBytes + line * 64);
  }
  MailboxHeader h;
  std::memcpy(&h, base, sizeof(h));
  if (h.magic != kSlotMagic) return protocol_error("a slot without the mailbox magic");
  if (h.payload_bytes > p.slot_bytes - kSlotHeaderBytes) {
    return protocol_error("a payload larger than a slot");
  }
  if (h.seq != p.recv_seq || mailbox_tag::low(c.tag) != (h.seq & 0xfffffu)) {
    return protocol_error("a message out of sequence");
  }
  ++p.recv_seq;
  ++stats_.received;
  InMessage* m = new_message();
  m->peer = peer;
  m->slot = slot;
  m->seq = h.seq;
  m->user_header = base + kMailboxHeaderBytes;
  m->payload = base + kSlotHeaderBytes;
  m->payload_bytes = h.payload_bytes;
  m->spilled = false;
  p.held[slot] = m;
  if (++p.held_count == p.slots) spill_oldest(peer);
  ev.kind = MailboxEvent::Kind::kMessage;
  ev.message = m;
  return ev;
}

void Mailbox::spill_oldest(int peer) {
  Peer& p = peers_[peer];
  InMessage* oldest = nullptr;
  for (InMessage* m : p.held) {
    if (m && (!oldest || p.recv_seq - m->seq > p.recv_seq - oldest->seq)) oldest = m;
  }
  if (!oldest) return;
  oldest->spill.resize(kUserHeaderBytes + oldest->payload_bytes);
  std::memcpy(oldest->spill.data(), oldest->user_header, kUserHeaderBytes);
  std::memcpy(oldest->spill.data() + kUserHeaderBytes, oldest->payload, oldest->payload_bytes);
  oldest->user_header = oldest->spill.data();
  oldest->payload = oldest->spill.data() + kUserHeaderBytes;
  oldest->spilled = true;
  p.held[oldest->slot] = nullptr;
  --p.held_count;
  ++stats_.spills;
  EC_DEBUG(kNet, "mailbox: spilled a message of rank %d (slot %u) to keep it sending", peer,
           oldest->slot);
  return_credit(peer, oldest->slot);
}

void Mailbox::release(InMessage* m) {
  if (!m->spilled) {
    Peer& p = peers_[m->peer];
    p.held[m->slot] = nullptr;
    --p.held_count;
    // Batched: sent when the engine runs out of work (return_due_credits), or at once when
    // half of this sender's slots wait for their credit, so that a sender never stalls on
    // them while this rank is busy. (Measured: the credit's ring push and wake-up check were
    // ~100 cycles of an 8-byte allreduce between reducing and completing.)
    if (!p.credit_listed) {
      p.credit_listed = true;
      credit_peers_.push_back(m->peer);
    }
    p.credits_due |= uint64_t{1} << m->slot;
    if (static_cast<uint32_t>(std::popcount(p.credits_due)) * 2 >= p.slots) {
      send_due_credits(m->peer);
    }
  }
  m->spill.clear();
  m->spilled = false;
  m->user_header = m->payload = nullptr;
  free_messages_.push_back(m);
}

}  // namespace eagercomm
