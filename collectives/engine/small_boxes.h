// Internal: per-pair boxes for small collectives on transports that map their allocations
// into every peer (inproc, shm). Not installed.
//
// Each rank allocates one region with, for every sender, kDepth slots. A slot holds one
// collective call's contribution: a 64-byte line with the sequence word, the call's signature,
// a mark word (a partial allreduce's rounds say there whether the store activates the round),
// and the first bytes of the payload, followed by the rest of the payload and, on a line of its
// own, the receiver's "consumed" word. A sender stores the payload and the signature, then the
// sequence word (release); the receiver polls the sequence word (acquire), so an 8-byte
// contribution crosses between cores as one cache line and needs no notification, no mailbox
// slot and no credit. That is what lets a small allreduce beat the general message path
// (bench/RESULTS.md, issue #4): the mailbox's slot header, notification ring and credits cost
// more than the data.
//
// Slot reuse: the slot of call `seq` is seq % kDepth. A sender stores into it only once the
// receiver has consumed (or discarded) whatever the sender put there before, and in sequence
// order. A receiver discards a leftover of a call it is not running (it failed, or it ran that
// call by another algorithm because its arguments differed) when it next reads that slot.
// Sequence numbers are the communicator's collective sequence numbers, so every rank agrees on
// them. A partial allreduce whose rounds fit has boxes of its own, numbered by round (every rank
// runs every round, in order).
//
// Waking: the communicator's boxes serve blocking calls, whose receivers wait in the call and
// sleep on the boxes' own futex (below). A partial allreduce's receiver is usually an idle
// engine asleep in the transport's wait(), so its senders wake it through the transport
// (Transport::wake_peer) instead.
//
// Trust: a peer can write anything into its slots of this rank's region. The receiver checks
// the signature against its own before it reads a payload, and reads only as many bytes as its
// own signature says (never more than max_bytes()), so a lying peer causes a mismatch error at
// worst, never a read outside the region.
//
// Sleeping: a receiver that has waited long announces itself in its region and sleeps on a
// futex there for at most kMaxSleep; a sender that sees the announcement wakes it. The sender
// checks without a fence (a full fence would be paid on every small call), so a wake-up can be
// missed when the receiver announces itself at the very moment the sender stores; the bounded
// sleep turns that rare race into a delay of at most kMaxSleep instead of a hang.
//
// Thread-safety: the current engine driver only, except wake_self() (any thread).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "collectives/engine/op.h"
#include "runtime/status.h"
#include "transport/transport.h"

namespace eagercomm::detail {

class SmallBoxes {
 public:
  static constexpr uint32_t kDepth = 8;
  // Largest world that gets boxes: memory grows with P^2 over the job and the direct exchange
  // with P; past this, recursive doubling over the mailbox is as fast.
  static constexpr int kMaxRanks = 32;
  static constexpr std::chrono::nanoseconds kMaxSleep = std::chrono::milliseconds(1);

  // This rank's boxes for contributions of up to `max_bytes` (> 0).
  static Result<std::unique_ptr<SmallBoxes>> create(Transport& transport, size_t max_bytes);
  ~SmallBoxes();

  size_t max_bytes() const { return max_bytes_; }
  // The packed remote key of this rank's region, for the peers' connect_peer().
  const std::vector<uint8_t>& key() const { return region_->remote_key(); }
  // Imports and maps `peer`'s region; kMismatch when its size says it was made for another
  // world size or another EAGERCOMM_SMALL_MAX_BYTES, kNotSupported when it cannot be mapped.
  Status connect_peer(int peer, std::span<const uint8_t> key);

  // Sender: call `seq` will post to `peer`. Calls must enqueue in sequence order (operations
  // start in that order): posts into a slot must follow the sequence, so a later call never
  // overtakes an earlier one that waits for the same slot.
  void enqueue(int peer, uint64_t seq);
  // Sender: stores this rank's contribution to call `seq` (enqueued) into `peer`'s box, with
  // `mark` (the receiver's arrived() reads it back). False while an earlier enqueued call has not
  // posted to `peer`, or the peer has not consumed what this rank stored in that slot before
  // (retry later).
  bool try_post(int peer, uint64_t seq, const OpSignature& sig, const void* data, size_t bytes,
                uint32_t mark = 0);
  // Sender: call `seq` will not post to `peer` after all (it failed).
  void dequeue(int peer, uint64_t seq);
  // Sender: wakes `peer` if it sleeps (after posting).
  void wake_if_sleeping(int peer);

  // Receiver: whether `sender`'s contribution to call `seq` arrived; if so, its signature and
  // payload (valid until consume()). Discards older leftovers in that slot. kProtocolError when
  // the slot holds a sequence number the protocol cannot produce.
  Result<bool> peek(int sender, uint64_t seq, OpSignature* sig, const uint8_t** payload);
  // Receiver: whether `sender`'s contribution to call `seq` is in its slot, and if so its mark.
  // Unlike peek(), it discards nothing: a partial allreduce asks it about rounds it has not
  // entered yet (partial_stream.h).
  bool arrived(int sender, uint64_t seq, uint32_t* mark = nullptr) const;
  // Receiver: frees the slot of `sender`'s call `seq` for its next use.
  void consume(int sender, uint64_t seq);
  // Receiver: call `seq` of this rank uses the boxes from now on / no longer. A contribution
  // left in a slot by a call this rank is not running (it failed, or this rank ran that call
  // by another algorithm) is discarded by the next peek() of the slot.
  void begin_call(uint64_t seq) { calls_.push_back(seq); }
  void end_call(uint64_t seq);

  // Sleeps until a sender wakes this rank, wake_self() is called, or min(timeout, kMaxSleep)
  // passes, unless `ready()` holds after the announcement (checked once, then no sleep).
  template <typename Ready>
  void sleep(std::chrono::nanoseconds timeout, Ready&& ready) {
    const uint32_t ticket = announce_sleep();
    if (!ready()) commit_sleep(ticket, timeout);
    end_sleep();
  }
  // Ends a sleep() of this rank now, if there is one. Any thread.
  void wake_self();

 private:
  struct Layout;
  SmallBoxes(Transport& transport, size_t max_bytes);
  uint32_t announce_sleep();
  void commit_sleep(uint32_t ticket, std::chrono::nanoseconds timeout);
  void end_sleep();
  uint8_t* own_slot(int sender, size_t k) const;

  Transport& transport_;
  const size_t max_bytes_;
  const size_t slot_bytes_;
  std::unique_ptr<MemoryRegion> region_;
  std::vector<std::unique_ptr<RemoteRegion>> remote_;  // per peer
  std::vector<uint8_t*> peer_box_;   // per peer: this rank's sender area in the peer's region
  std::vector<uint8_t*> peer_head_;  // per peer: the peer's control line
  // Per peer and slot: what this rank last stored there (its sequence word), to know when the
  // peer consumed it.
  std::vector<uint64_t> stored_;
  // Per peer: calls waiting to post, in sequence order, from index post_head_[peer] on.
  std::vector<std::vector<uint64_t>> post_queue_;
  std::vector<size_t> post_head_;
  std::vector<uint64_t> calls_;  // calls of this rank between begin_call() and end_call()
};

}  // namespace eagercomm::detail
