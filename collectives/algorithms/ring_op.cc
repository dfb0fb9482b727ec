#include "collectives/algorithms/ring_op.h"

namespace eagercomm::detail {

void RingOp::init_ring(const OpContext& ctx, size_t own_chunks, size_t expected) {
  P_ = ctx.size;
  r_ = ctx.rank;
  pred_ = (r_ + P_ - 1) % P_;
  succ_ = (r_ + 1) % P_;
  own_chunks_ = P_ == 1 ? 0 : own_chunks;
  expected_ = P_ == 1 ? 0 : expected;
}

Status RingOp::on_message(OpContext& ctx, const Received& r) {
  (void)ctx;
  if (r.message->peer != pred_) {
    return bad_message(*this, r.message->peer, "ring data from a rank that is not the predecessor");
  }
  inbound_.push_back(r);
  return Status::Ok();
}

Result<int> RingOp::advance(OpContext& ctx) {
  int steps = 0;
  for (;;) {
    if (!inbound_.empty()) {
      EC_ASSIGN_OR_RETURN(const bool done, process(ctx, inbound_.front()));
      if (done) {
        ctx.mailbox->release(inbound_.front().message);
        inbound_.pop_front();
        ++processed_;
        ++steps;
        continue;
      }
    }
    if (own_sent_ < own_chunks_ && ctx.mailbox->credits(succ_) >= 2) {
      SendSlot slot;
      ctx.mailbox->try_acquire(succ_, &slot);
      EC_RETURN_IF_ERROR(send_own(ctx, slot, own_sent_));
      ++own_sent_;
      ++steps;
      continue;
    }
    return steps;
  }
}

bool RingOp::finished() const { return processed_ == expected_ && own_sent_ == own_chunks_; }

void RingOp::drop_held(OpContext& ctx) {
  for (auto& r : inbound_) ctx.mailbox->release(r.message);
  inbound_.clear();
}

}  // namespace eagercomm::detail
