// Which slots a mailbox keeps for each peer, and where they sit in its inbox.
//
// A sender writes into its own slots of the receiver's inbox, so both must compute the same
// layout without talking: a MailboxLayout is a rule every rank evaluates alike. Slots per peer
// need not be uniform: the collectives give full, deep slots only to the peers their algorithms
// send data to (O(log P) of them) and small ones to the rest, which only ever get headers and
// short texts (collectives/engine/partner_layout.h). The rule must be symmetric,
// shape(a, b) == shape(b, a): a rank stages what it sends to a peer in a copy of its own slots
// for that peer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace eagercomm {

struct SlotShape {
  uint32_t slots = 0;     // 2 .. kMaxSlots
  size_t slot_bytes = 0;  // a multiple of 64, header included
  size_t bytes() const { return static_cast<size_t>(slots) * slot_bytes; }
};

class MailboxLayout {
 public:
  virtual ~MailboxLayout() = default;
  int size() const { return size_; }
  // The slots `receiver` keeps for `sender` (receiver != sender).
  virtual SlotShape shape(int receiver, int sender) const = 0;
  // Where they start in the receiver's inbox.
  virtual size_t offset(int receiver, int sender) const = 0;
  // The receiver's inbox: every peer's slots, its own excluded.
  virtual size_t inbox_bytes(int receiver) const = 0;
  // The deepest and largest slots of the layout (what collectives chunk their data to).
  virtual SlotShape data_shape() const = 0;

 protected:
  explicit MailboxLayout(int size) : size_(size) {}

 private:
  int size_;
};

// Every peer alike: `shape` for each, in rank order.
std::unique_ptr<MailboxLayout> uniform_mailbox_layout(int size, SlotShape shape);

// The memory a mailbox registers under `layout` on `rank`: its inbox and, `staged`, the staging
// copy of its slots in the peers' inboxes where a transport cannot store into them.
uint64_t mailbox_registered_bytes(const MailboxLayout& layout, int rank, bool staged);

}  // namespace eagercomm
