// Internal: the mailbox layout of a communicator. Not installed.
//
// Full slots for the peers the algorithms send payloads to (data_partners: O(log P) of them),
// control slots for everybody else: a job of P ranks then registers memory that grows with
// log P, not with P (issue 21; docs/ARCHITECTURE.md, "Mailbox memory"). The shapes:
//   - ring / chain neighbours (r +- 1): EAGERCOMM_SLOTS x EAGERCOMM_SLOT_BYTES, as deep as
//     configured: they carry the pipelined chunks of the ring and the chain broadcast;
//   - the other data partners: half as many slots (at least 2) of the same size: trees,
//     recursive doubling and the barrier send one message per step to each;
//   - every other peer: kControlSlots slots of kControlSlotBytes, for what any rank may send any
//     other (an operation's error with its text, signature probes, a quorum's arrival at its
//     coordinator, a partial stream's flush and close notices).
#pragma once

#include <memory>

#include "transport/mailbox_layout.h"

namespace eagercomm::detail {

inline constexpr uint32_t kControlSlots = 4;
inline constexpr size_t kControlSlotBytes = 1024;

// The layout above for `size` ranks with `data` (EAGERCOMM_SLOTS, EAGERCOMM_SLOT_BYTES) as the
// full shape; `rank` is the caller's (its partners are kept, the others computed on demand).
std::unique_ptr<MailboxLayout> partner_mailbox_layout(int rank, int size, SlotShape data);

}  // namespace eagercomm::detail
