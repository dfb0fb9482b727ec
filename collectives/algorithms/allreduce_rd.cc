// Recursive-doubling allreduce for messages that fit one mailbox slot: log2(P) exchanges.
//
// Any P: with p2 the largest power of two <= P and rem = P - p2, the first 2*rem ranks pair
// up (even sends to odd, odd reduces and joins the doubling with rank r/2; even waits for the
// result), the others join with rank r - rem. In each doubling step both partners compute
// op(lower rank's value, higher rank's value), so both hold the same bits and, by induction,
// every rank ends with identical results.
//
// The partial results live in a scratch buffer owned by the operation and reach the caller's
// output only at the end: a rank can only finish after every message it combined carried the
// same signature as its own, so a mismatch between ranks never leaves a partial sum in the
// caller's buffer (in-place calls keep their input).
#include <cstring>
#include <vector>

#include "collectives/algorithms/algorithms.h"
#include "collectives/kernels/reduce_kernels.h"

namespace eagercomm::detail {
namespace {

class RdAllreduce final : public QueuedOp {
 public:
  RdAllreduce(OpSignature sig, const void* in, void* out)
      : QueuedOp(sig),
        in_(static_cast<const uint8_t*>(in)),
        out_(static_cast<uint8_t*>(out)),
        type_(static_cast<DataType>(sig.dtype)),
        op_(static_cast<ReduceOp>(sig.redop)),
        bytes_(sig.count * dtype_size(type_)) {}

  Status start(OpContext& ctx) override {
    init_queues(ctx);
    p2_ = 1;
    while (p2_ * 2 <= P_) p2_ *= 2;
    rem_ = P_ - p2_;
    int log = 0;
    while ((1 << log) < p2_) ++log;
    post_step_ = 1 + log;
    if (bytes_ > ctx.mailbox->payload_capacity()) {
      return make_status(StatusCode::kInternal, "recursive doubling chosen for %zu bytes", bytes_);
    }
    // Small results (the usual case for this algorithm) live in the operation itself: one
    // allocation less per call.
    if (bytes_ > sizeof(acc_inline_)) acc_heap_.resize(bytes_);
    acc_ = bytes_ > sizeof(acc_inline_) ? acc_heap_.data() : acc_inline_;
    if (bytes_) std::memcpy(acc_, in_, bytes_);
    if (r_ < 2 * rem_) {
      phase_ = (r_ % 2 == 0) ? Phase::kSendToOdd : Phase::kReceiveFromEven;
      newrank_ = r_ / 2;
    } else {
      phase_ = Phase::kDoubling;
      newrank_ = r_ - rem_;
    }
    if (P_ == 1) {
      publish();
      phase_ = Phase::kDone;
    }
    return Status::Ok();
  }

  Result<int> advance(OpContext& ctx) override {
    int steps = 0;
    for (;;) {
      switch (phase_) {
        case Phase::kSendToOdd: {
          EC_ASSIGN_OR_RETURN(const bool sent, send_out(ctx, r_ + 1, 0));
          if (!sent) return steps;
          phase_ = Phase::kReceiveResult;
          ++steps;
          break;
        }
        case Phase::kReceiveResult: {
          Result<const Received*> m = take(r_ + 1, post_step_);
          if (!m.ok()) return m.status();
          if (!*m) return steps;
          if (bytes_ && !ctx.elided(bytes_)) std::memcpy(acc_, (*m)->message->payload, bytes_);
          queues_.pop_release(ctx, r_ + 1);
          publish();
          phase_ = Phase::kDone;
          ++steps;
          break;
        }
        case Phase::kReceiveFromEven: {
          Result<const Received*> m = take(r_ - 1, 0);
          if (!m.ok()) return m.status();
          if (!*m) return steps;
          if (!ctx.elided(bytes_))
            reduce(type_, op_, acc_, (*m)->message->payload, acc_, sig_.count);
          queues_.pop_release(ctx, r_ - 1);
          phase_ = Phase::kDoubling;
          ++steps;
          break;
        }
        case Phase::kDoubling: {
          if (mask_ >= p2_) {
            if (r_ < 2 * rem_) {
              phase_ = Phase::kSendResult;
            } else {
              publish();
              phase_ = Phase::kDone;
            }
            break;
          }
          const int pn = newrank_ ^ mask_;
          const int partner = rd_real_rank(pn, rem_);
          const uint32_t step = static_cast<uint32_t>(1 + __builtin_ctz(mask_));
          if (!sent_) {
            EC_ASSIGN_OR_RETURN(const bool sent, send_out(ctx, partner, step));
            if (!sent) return steps;
            sent_ = true;
            ++steps;
          }
          Result<const Received*> m = take(partner, step);
          if (!m.ok()) return m.status();
          if (!*m) return steps;
          const uint8_t* theirs = (*m)->message->payload;
          uint8_t* acc = acc_;
          if (ctx.elided(bytes_)) {
            // The payload's values were not delivered (TransportCaps): nothing to combine.
          } else if (partner < r_) {
            reduce(type_, op_, acc, theirs, acc, sig_.count);
          } else {
            reduce(type_, op_, acc, acc, theirs, sig_.count);
          }
          queues_.pop_release(ctx, partner);
          mask_ <<= 1;
          sent_ = false;
          ++steps;
          break;
        }
        case Phase::kSendResult: {
          EC_ASSIGN_OR_RETURN(const bool sent, send_out(ctx, r_ - 1, post_step_));
          if (!sent) return steps;
          publish();
          phase_ = Phase::kDone;
          ++steps;
          break;
        }
        case Phase::kDone:
          return steps;
      }
    }
  }

  bool finished() const override { return phase_ == Phase::kDone; }

 private:
  enum class Phase { kSendToOdd, kReceiveResult, kReceiveFromEven, kDoubling, kSendResult, kDone };

  // Sends this rank's current value to `peer`; false when no slot is free yet.
  Result<bool> send_out(OpContext& ctx, int peer, uint32_t step) {
    SendSlot slot;
    if (!ctx.mailbox->try_acquire(peer, &slot)) return false;
    if (bytes_) std::memcpy(slot.payload, acc_, bytes_);
    EC_RETURN_IF_ERROR(send(ctx, slot, MsgKind::kData, step, 0, 0, bytes_));
    return true;
  }

  // The next message from `peer` if it arrived (nullptr if not), checked to be `step`'s.
  Result<const Received*> take(int peer, uint32_t step) {
    if (queues_.empty(peer)) return static_cast<const Received*>(nullptr);
    const Received& m = queues_.front(peer);
    if (m.header.kind != static_cast<uint32_t>(MsgKind::kData) || m.header.step != step ||
        m.message->payload_bytes != bytes_) {
      return bad_message(*this, peer, "a recursive-doubling message for another step or size");
    }
    return &m;
  }

  void publish() {
    if (bytes_) std::memcpy(out_, acc_, bytes_);
  }

  const uint8_t* in_;
  uint8_t* out_;
  alignas(16) uint8_t acc_inline_[256];  // not 64: an over-aligned op needs aligned new, slow
  std::vector<uint8_t> acc_heap_;
  uint8_t* acc_ = acc_inline_;
  DataType type_;
  ReduceOp op_;
  size_t bytes_;
  int p2_ = 1, rem_ = 0, newrank_ = 0, mask_ = 1;
  uint32_t post_step_ = 1;
  bool sent_ = false;
  Phase phase_ = Phase::kDone;
};

}  // namespace

std::shared_ptr<Op> make_rd_allreduce(OpSignature sig, const void* in, void* out) {
  return std::make_shared<RdAllreduce>(sig, in, out);
}

}  // namespace eagercomm::detail
