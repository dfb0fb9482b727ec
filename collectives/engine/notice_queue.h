// Internal: header-only or short-text messages (operation errors, signature probes, a stream's
// notices) waiting for a free slot at their peer. Not installed.
//
// A notice is queued rather than sent when the peer has no free slot: the driver must never
// wait for a peer, and the notice that matters (an error the peer is waiting for) must not be
// lost. Thread-safety: the current engine driver only.
#pragma once

#include <string>
#include <vector>

#include "collectives/engine/op.h"
#include "transport/mailbox.h"
#include "transport/transport.h"

namespace eagercomm::detail {

class NoticeQueue {
 public:
  explicit NoticeQueue(int rank) : rank_(rank) {}

  void push(int peer, const MsgHeader& header, std::string text = {}) {
    queued_.push_back(Notice{peer, header, std::move(text)});
  }
  bool empty() const { return queued_.empty(); }
  // Drops the queued probes of operation `key` (moot once it failed; they must not take the
  // slots its error notice needs).
  void drop_probes(OpKey key);
  // Sends what finds a free slot at its peer through `mailbox` (texts truncated to the slot);
  // returns how many went.
  int send(Mailbox& mailbox, const Transport& transport);

 private:
  struct Notice {
    int peer;
    MsgHeader header;
    std::string text;
  };
  const int rank_;
  std::vector<Notice> queued_;
};

}  // namespace eagercomm::detail
