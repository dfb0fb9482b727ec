// Internal: the pieces every collective state machine shares. Not installed.
//
// A collective operation is an Op: created by the application thread, handed to the engine
// through the submission queue, then advanced only by the engine's current driver. Its
// messages carry a MsgHeader (the 48-byte user header of a mailbox slot) with the operation's
// key and signature, so that the receiver routes them and checks that both ranks called the
// same collective with the same arguments before touching any data.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "collectives/config.h"
#include "collectives/dtype.h"
#include "runtime/mpsc_queue.h"
#include "runtime/status.h"
#include "transport/mailbox.h"

namespace eagercomm::detail {

enum class CollKind : uint8_t { kAllreduce = 1, kBroadcast, kAllgather, kBarrier };
const char* coll_kind_name(CollKind kind);

// What every rank must agree on for one collective call.
struct OpSignature {
  uint8_t coll = 0;
  uint8_t dtype = 0;
  uint8_t redop = 0;
  uint8_t reserved = 0;
  int32_t root = 0;
  uint64_t count = 0;
  bool operator==(const OpSignature&) const = default;
};
static_assert(sizeof(OpSignature) == 16);
// OpSignature::root of the collectives a partial allreduce runs on the collective stream (no
// application call has a negative root): describe() then names what the application called, not
// the internal allgather / allreduce, and a rank that made an ordinary collective of the same
// shape meanwhile gets a mismatch instead of joining it.
inline constexpr int32_t kPartialCreateTag = -2;
inline constexpr int32_t kPartialFlushTag = -3;
// "allreduce(count=10, f32, sum)"; "partial allreduce creation" / "partial allreduce flush()"
// for the tags.
std::string describe(const OpSignature& sig);
// kMismatch for call #seq: `peer` called `theirs`, `rank` called `mine` (or, when only the
// algorithms differ, the settings that choose them do).
Status signature_mismatch(uint64_t seq, int peer, const OpSignature& theirs, int rank,
                          const OpSignature& mine);

// Operation key: the stream (0: the communicator's collectives) and the call's sequence number
// in that stream. Every rank numbers its calls in the same order (as MPI requires).
using OpKey = uint64_t;
inline OpKey make_key(uint32_t stream, uint64_t seq) {
  return (static_cast<uint64_t>(stream) << 48) | (seq & 0xffffffffffffull);
}
inline uint32_t key_stream(OpKey key) { return static_cast<uint32_t>(key >> 48); }
inline uint64_t key_seq(OpKey key) { return key & 0xffffffffffffull; }

enum class MsgKind : uint32_t {
  kData = 1,          // algorithm data
  kAck = 2,           // broadcast: the sender's subtree checked the signature
  kConfirm = 3,       // broadcast: every rank checked it
  kOpError = 4,       // the sender failed this operation; payload: the reason (text)
  kActivate = 6,      // partial allreduce: round `a` is active (flooded from rank `step`)
  kArrive = 7,        // partial allreduce: rank `step` posted fresh for round `a` (relayed to its
                      // coordinator along data partners)
  kStreamClosed = 8,  // partial allreduce: rank `step` will not finish rounds from `a` on
  kFlushing = 9,      // partial allreduce: rank `step` is in flush number `a` and posts no more
                      // (down the tree rooted at it)
  kProbe = 10,        // the sender has waited in this collective: compare signatures (comm_core.cc)
};

struct MsgHeader {
  OpKey key = 0;
  OpSignature sig;
  uint32_t kind = 0;
  uint32_t step = 0;
  uint64_t a = 0;  // algorithm-specific: chunk index, element offset
  uint64_t b = 0;
};
static_assert(sizeof(MsgHeader) == kUserHeaderBytes);

MsgHeader read_header(const InMessage& m);

struct Received {
  InMessage* message;
  MsgHeader header;
};

// What an operation sees of its communicator while the engine advances it.
class SmallBoxes;

struct OpContext {
  int rank;
  int size;
  Mailbox* mailbox;
  Transport* transport;
  const Config* config;
  SmallBoxes* small = nullptr;  // null when the transport cannot share them
  // TransportCaps::payloads_elided_above: payloads of more bytes carry no values.
  uint64_t elided_above = UINT64_MAX;

  bool elided(size_t payload_bytes) const { return payload_bytes > elided_above; }
};

class Op : public MpscNode {
 public:
  Op(OpSignature sig) : sig_(sig) {}
  virtual ~Op() = default;

  const OpSignature& sig() const { return sig_; }
  OpKey key() const { return key_; }
  void set_key(OpKey key) { key_ = key; }

  // Engine side. start() runs once; then on_message() for each of its messages (signature
  // already checked) and advance() on every progress pass until finished() or an error.
  virtual Status start(OpContext& ctx) = 0;
  virtual Status on_message(OpContext& ctx, const Received& r) = 0;
  // Returns the number of steps taken (0: waiting), or an error.
  virtual Result<int> advance(OpContext& ctx) = 0;
  virtual bool finished() const = 0;
  // Releases every message the operation still holds (on failure or abort).
  virtual void drop_held(OpContext& ctx) = 0;
  // Peers that may still read or write this rank's buffers directly (they hold its remote
  // keys and have not said they are done). destroy() waits for them before returning.
  virtual std::vector<int> peers_using_buffers() const { return {}; }
  // True for algorithms in which peers read or write this rank's buffers directly.
  virtual bool shares_buffers() const { return false; }
  // True for operations whose peers' data lands in SmallBoxes rather than in messages (the
  // engine's idle driver then sleeps on the boxes).
  virtual bool uses_small_boxes() const { return false; }
  // True while the operation has stores to make into a peer's box that has no room yet: the
  // peer frees it without telling anyone, so the idle driver must look again soon.
  virtual bool waits_for_room() const { return false; }
  // Whether advance() would make progress now (a cheap look before the driver sleeps).
  virtual bool has_news(OpContext& ctx) {
    (void)ctx;
    return false;
  }

  // Completion, visible to the application thread.
  bool done() const { return done_.load(std::memory_order_acquire); }
  const Status& status() const { return status_; }  // valid once done()
  void complete(Status status) {
    status_ = std::move(status);
    done_.store(true, std::memory_order_release);
  }

  // Makes a finished operation, referenced by nobody else, new again with `sig` (reused
  // operation objects spare an allocation per blocking call).
  void rearm(OpSignature sig);

  // A local error found before start (bad arguments): the engine fails the operation on
  // every rank with it instead of starting it.
  Status precheck_error;

  // Signature probe state (comm_core.cc): when the idle driver first saw the operation waiting
  // (zero: not yet), and the first peer not probed yet (the world size: all were).
  std::chrono::steady_clock::time_point waiting_since{};
  int probe_next = 0;

  // The engine's reference while the operation is queued or active.
  std::shared_ptr<Op> self;
  // Whatever owns the operation's buffers, kept alive as long as the operation (partial
  // allreduce rounds run on buffers of their object, which peers may still be writing into).
  std::shared_ptr<void> keep_alive;

 protected:
  // Fills a slot's header and sends it.
  Status send(OpContext& ctx, const SendSlot& slot, MsgKind kind, uint32_t step, uint64_t a,
              uint64_t b, size_t payload_bytes);
  OpSignature sig_;
  OpKey key_ = 0;

 private:
  std::atomic<bool> done_{false};
  Status status_;
};

// A FIFO of received messages per peer, for operations that consume them in order. One list
// in arrival order for all peers, the first few entries inside the operation: an operation
// holds few messages at a time (at most the peers' slots), and a small one then allocates
// nothing for them (measured: the allocation was a tenth of an 8-byte allreduce).
class PeerQueues {
 public:
  void push(const Received& r) {
    if (!big_ && n_ < kInline) {
      small_[n_++] = r;
      return;
    }
    if (!big_) {
      spill_.assign(small_, small_ + n_);
      big_ = true;
    }
    spill_.push_back(r);
  }
  bool empty(int peer) const { return find(peer) == size(); }
  // Whether a message of `step` from `peer` is waiting.
  bool holds(int peer, uint32_t step) const {
    for (size_t i = 0; i < size(); ++i) {
      if (at(i).message->peer == peer && at(i).header.step == step) return true;
    }
    return false;
  }
  const Received& front(int peer) const { return at(find(peer)); }
  void pop_release(OpContext& ctx, int peer) {
    const size_t i = find(peer);
    ctx.mailbox->release(at(i).message);
    if (big_) {
      spill_.erase(spill_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      for (size_t k = i + 1; k < n_; ++k) small_[k - 1] = small_[k];
      --n_;
    }
  }
  void drop_all(OpContext& ctx) {
    for (size_t i = 0; i < size(); ++i) ctx.mailbox->release(at(i).message);
    n_ = 0;
    spill_.clear();
    big_ = false;
  }

 private:
  static constexpr size_t kInline = 4;
  size_t size() const { return big_ ? spill_.size() : n_; }
  const Received& at(size_t i) const { return big_ ? spill_[i] : small_[i]; }
  size_t find(int peer) const {
    size_t i = 0;
    while (i < size() && at(i).message->peer != peer) ++i;
    return i;
  }
  Received small_[kInline];
  size_t n_ = 0;
  bool big_ = false;  // the entries live in spill_ (more than kInline arrived at once)
  std::vector<Received> spill_;
};

// An operation that keeps each peer's messages in a FIFO until it consumes them.
class QueuedOp : public Op {
 public:
  using Op::Op;
  Status on_message(OpContext& ctx, const Received& r) override {
    (void)ctx;
    queues_.push(r);
    return Status::Ok();
  }
  void drop_held(OpContext& ctx) override { queues_.drop_all(ctx); }

 protected:
  // First thing in start().
  void init_queues(const OpContext& ctx) {
    P_ = ctx.size;
    r_ = ctx.rank;
  }
  PeerQueues queues_;
  int P_ = 1, r_ = 0;
};

// Element range [begin, begin + count) of part `index` when `total` elements are split into
// `parts` near-equal parts (the first total % parts parts get one more).
struct Span {
  size_t begin;
  size_t count;
};
inline Span split(size_t total, size_t parts, size_t index) {
  const size_t base = total / parts, extra = total % parts;
  return Span{index * base + std::min(index, extra), base + (index < extra ? 1 : 0)};
}

}  // namespace eagercomm::detail
