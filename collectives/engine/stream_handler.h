// Internal: the engine-side owner of one operation stream besides the communicator's own
// collective stream (stream 0). A persistent partial allreduce is one such stream: its rounds are
// operations keyed (stream, sequence), started by the handler rather than by the application.
//
// CommCore routes to the handler every message of its stream that no active operation claims
// (control messages such as activations and arrivals, data of rounds not started yet, stale
// data), tells it when its operations finish, and calls advance() on every progress pass. All
// calls come from the engine's current driver.
#pragma once

#include <chrono>

#include "collectives/engine/op.h"
#include "runtime/status.h"

namespace eagercomm::detail {

class StreamHandler {
 public:
  virtual ~StreamHandler() = default;
  // The handler releases the message or keeps it (and releases it later).
  virtual void on_message(InMessage* m, const MsgHeader& h) = 0;
  // Returns the number of events handled (0: idle).
  virtual int advance() = 0;
  // When advance() must run again although no message or post comes (a timer of the stream's
  // own); max: never. Asked after every advance(); an idle engine sleeps no longer. Partial
  // streams set one while a round waits for room in a peer's box, and deadline(T) rounds at their
  // coordinator.
  virtual std::chrono::steady_clock::time_point next_due() const {
    return std::chrono::steady_clock::time_point::max();
  }
  // An operation the handler started has completed with `status`.
  virtual void on_op_done(Op* op, const Status& status) = 0;
  // `peer` left the communicator or broke the protocol.
  virtual void on_peer_gone(int peer, const Status& why) = 0;
  // The communicator is being destroyed: fail what is pending, tell the peers.
  virtual void on_closed() = 0;
};

}  // namespace eagercomm::detail
