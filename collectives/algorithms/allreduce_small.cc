// Small allreduce through SmallBoxes (small_boxes.h): every rank stores its contribution into
// every peer's box, waits for the peers' contributions in its own, and reduces all P of them
// in rank order. One exchange, no messages: for a few bytes that beats recursive doubling's
// log2(P) message round trips, each of which pays the mailbox and a notification.
//
// Every rank combines the same inputs in the same order (rank 0's op rank 1's, then op rank
// 2's, ...), so the replicas are identical bit for bit. Nothing reaches the caller's output
// before every peer's signature matched this rank's, so a mismatch never leaves a partial
// result (in-place calls keep their input).
//
// A peer that took another algorithm for the same call (its count put it above
// EAGERCOMM_SMALL_MAX_BYTES) sends messages instead; the engine routes them to this operation
// by key and reports the mismatch on every rank, as for any other algorithm.
//
// The same machine runs a partial allreduce's rounds (make_round_allreduce) through the object's
// own boxes, numbered by round: there every rank of the object runs every round alike (decided
// at creation), and the peers it stores into are usually not in the call yet, so each store
// wakes them through the transport (their engines sleep there) and a store that must wait for
// room says so (waits_for_room).
#include <cstring>
#include <vector>

#include "collectives/algorithms/algorithms.h"
#include "collectives/engine/small_boxes.h"
#include "collectives/kernels/reduce_kernels.h"

namespace eagercomm::detail {
namespace {

class SmallAllreduce final : public Op {
 public:
  SmallAllreduce(OpSignature sig, const void* in, void* out) : Op(sig) { bind(in, out); }
  // A partial allreduce's round: its object's boxes, numbered by round.
  SmallAllreduce(OpSignature sig, void* buffer, SmallBoxes* boxes, uint64_t round, uint32_t mark)
      : Op(sig), round_boxes_(boxes), round_(round), mark_(mark) {
    bind(buffer, buffer);
  }

  void bind(const void* in, void* out) {
    in_ = static_cast<const uint8_t*>(in);
    out_ = static_cast<uint8_t*>(out);
  }

  Status start(OpContext& ctx) override {
    boxes_ = round_boxes_ ? round_boxes_ : ctx.small;
    transport_ = ctx.transport;
    comm_boxes_ = ctx.small;
    P_ = ctx.size;
    r_ = ctx.rank;
    seq_ = round_boxes_ ? round_ : key_seq(key());
    type_ = static_cast<DataType>(sig_.dtype);
    redop_ = static_cast<ReduceOp>(sig_.redop);
    bytes_ = sig_.count * dtype_size(type_);
    finished_ = false;
    if (boxes_ == nullptr || bytes_ > boxes_->max_bytes() || P_ > SmallBoxes::kMaxRanks) {
      return make_status(StatusCode::kInternal, "small allreduce chosen for %zu bytes", bytes_);
    }
    const uint64_t everyone = (uint64_t{1} << P_) - 1;  // P_ <= kMaxRanks < 64
    to_post_ = to_take_ = everyone & ~(uint64_t{1} << r_);
    taken_ = 0;
    inputs_.assign(P_, nullptr);
    inputs_[r_] = in_;
    boxes_->begin_call(seq_);
    for (uint64_t left = to_post_; left; left &= left - 1) {
      boxes_->enqueue(__builtin_ctzll(left), seq_);
    }
    post();
    return Status::Ok();
  }

  Status on_message(OpContext& ctx, const Received& r) override {
    (void)ctx;
    // Only a peer of the same signature, hence of the same algorithm, gets here: that peer
    // stores into the boxes and sends no message.
    return bad_message(*this, r.message->peer, "a message for a small-box allreduce");
  }

  Result<int> advance(OpContext& ctx) override {
    (void)ctx;
    if (finished_) return 0;
    int steps = 0;
    if (to_post_) steps += post();
    for (uint64_t left = to_take_ & ~taken_; left; left &= left - 1) {
      const int peer = __builtin_ctzll(left);
      OpSignature theirs;
      const uint8_t* payload = nullptr;
      EC_ASSIGN_OR_RETURN(bool arrived, boxes_->peek(peer, seq_, &theirs, &payload));
      if (!arrived) continue;
      taken_ |= uint64_t{1} << peer;
      ++steps;
      if (!(theirs == sig_)) return signature_mismatch(seq_, peer, theirs, r_, sig_);
      inputs_[peer] = payload;
    }
    if (taken_ != to_take_ || to_post_) return steps;
    reduce_all();
    for (uint64_t left = to_take_; left; left &= left - 1)
      boxes_->consume(__builtin_ctzll(left), seq_);
    boxes_->end_call(seq_);
    to_take_ = taken_ = 0;
    finished_ = true;
    return steps + 1;
  }

  bool has_news(OpContext& ctx) override {
    (void)ctx;
    for (uint64_t left = to_take_ & ~taken_; left; left &= left - 1) {
      OpSignature theirs;
      const uint8_t* payload = nullptr;
      Result<bool> arrived = boxes_->peek(__builtin_ctzll(left), seq_, &theirs, &payload);
      if (!arrived.ok() || *arrived) return true;
    }
    return false;
  }

  bool finished() const override { return finished_; }

  void drop_held(OpContext& ctx) override {
    (void)ctx;
    // Contributions this call will never use: the slots are freed now (those that arrived) or
    // when a later call reads them (end_call()).
    for (uint64_t left = taken_; left; left &= left - 1)
      boxes_->consume(__builtin_ctzll(left), seq_);
    if (boxes_) boxes_->end_call(seq_);
    for (uint64_t left = to_post_; left; left &= left - 1) {
      boxes_->dequeue(__builtin_ctzll(left), seq_);
    }
    to_take_ = taken_ = to_post_ = 0;
  }

  // A round's boxes are the object's, not the communicator's: the idle driver must not sleep on
  // the communicator's (their senders ring the transport, post()).
  bool uses_small_boxes() const override { return round_boxes_ == nullptr; }
  bool waits_for_room() const override { return round_boxes_ != nullptr && to_post_ != 0; }

 private:
  // Stores this rank's contribution into every peer's box that has room; returns how many.
  int post() {
    int n = 0;
    for (uint64_t left = to_post_; left; left &= left - 1) {
      const int peer = __builtin_ctzll(left);
      if (!boxes_->try_post(peer, seq_, sig_, in_, bytes_, mark_)) continue;
      to_post_ &= ~(uint64_t{1} << peer);
      ++n;
      if (round_boxes_) {
        // The peer may not have entered the round: its engine sleeps in the transport's wait()
        // (or, while it runs a small collective of its own, on the communicator's boxes).
        transport_->wake_peer(peer);
        if (comm_boxes_) comm_boxes_->wake_if_sleeping(peer);
      }
    }
    if (n && !round_boxes_) {
      for (uint64_t left = to_take_; left; left &= left - 1) {
        boxes_->wake_if_sleeping(__builtin_ctzll(left));
      }
    }
    return n;
  }

  void reduce_all() {
    if (bytes_ == 0) return;
    if (P_ == 1) {
      if (out_ != in_) std::memcpy(out_, in_, bytes_);
      return;
    }
    // Reducing into out_ overwrites an in-place input before rank r_ >= 2 adds it.
    if (out_ == in_ && r_ >= 2) {
      own_.assign(in_, in_ + bytes_);
      inputs_[r_] = own_.data();
    }
    reduce(type_, redop_, out_, inputs_[0], inputs_[1], sig_.count);
    for (int i = 2; i < P_; ++i) reduce(type_, redop_, out_, out_, inputs_[i], sig_.count);
  }

  const uint8_t* in_ = nullptr;
  uint8_t* out_ = nullptr;
  SmallBoxes* const round_boxes_ = nullptr;  // a partial allreduce's round: its object's boxes
  const uint64_t round_ = 0;
  const uint32_t mark_ = 0;  // stored with each contribution (a round's: does it activate)
  SmallBoxes* boxes_ = nullptr;
  SmallBoxes* comm_boxes_ = nullptr;
  Transport* transport_ = nullptr;
  int P_ = 1, r_ = 0;
  uint64_t seq_ = 0;
  DataType type_ = DataType::kFloat32;
  ReduceOp redop_ = ReduceOp::kSum;
  size_t bytes_ = 0;
  uint64_t to_post_ = 0;  // peers whose box still lacks this rank's contribution
  uint64_t to_take_ = 0;  // peers whose contribution this call needs
  uint64_t taken_ = 0;    // ... and has seen
  bool finished_ = false;
  std::vector<const uint8_t*> inputs_;  // per rank, valid once taken
  std::vector<uint8_t> own_;            // this rank's input, kept for in-place calls
};

}  // namespace

std::shared_ptr<Op> make_small_allreduce(OpSignature sig, const void* in, void* out) {
  return std::make_shared<SmallAllreduce>(sig, in, out);
}

std::shared_ptr<Op> make_round_allreduce(OpSignature sig, void* buffer, SmallBoxes* boxes,
                                         uint64_t round, uint32_t mark) {
  return std::make_shared<SmallAllreduce>(sig, buffer, boxes, round, mark);
}

void rearm_small_allreduce(Op& op, OpSignature sig, const void* in, void* out) {
  auto& small = static_cast<SmallAllreduce&>(op);
  small.rearm(sig);
  small.bind(in, out);
}

}  // namespace eagercomm::detail
