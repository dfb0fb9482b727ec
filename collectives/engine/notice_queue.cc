#include "collectives/engine/notice_queue.h"

#include <algorithm>
#include <cstring>

#include "collectives/collective_log.h"

namespace eagercomm::detail {

void NoticeQueue::drop_probes(OpKey key) {
  std::erase_if(queued_, [&](const Notice& n) {
    return n.header.key == key && n.header.kind == static_cast<uint32_t>(MsgKind::kProbe);
  });
}

int NoticeQueue::send(Mailbox& mailbox, const Transport& transport) {
  int sent = 0;
  for (auto it = queued_.begin(); it != queued_.end();) {
    SendSlot slot;
    if (!mailbox.try_acquire(it->peer, &slot)) {
      if (mailbox.unreachable(it->peer)) {
        // Its inbox could not be imported on first use (the engine was told, and marks it gone):
        // the notice cannot go, and must not hold back destroy().
        EC_DEBUG(kColl, "no notice to rank %d, which cannot be reached", it->peer);
        it = queued_.erase(it);
        continue;
      }
      ++it;
      continue;
    }
    std::memcpy(slot.user_header, &it->header, sizeof(MsgHeader));
    const size_t n = std::min(it->text.size(), mailbox.payload_capacity(it->peer));
    std::memcpy(slot.payload, it->text.data(), n);
    Status s = mailbox.send(slot, n);
    if (!s.ok() && transport.peer_left(it->peer)) {
      // A peer that left needs no notice (a normal shutdown, ranks leaving in any order).
      EC_DEBUG(kColl, "no notice to rank %d, which left: %s", it->peer, s.to_string().c_str());
    } else if (!s.ok()) {
      EC_WARN(kColl, "could not send a notice to rank %d: %s", it->peer, s.to_string().c_str());
    }
    it = queued_.erase(it);
    ++sent;
  }
  return sent;
}

}  // namespace eagercomm::detail
