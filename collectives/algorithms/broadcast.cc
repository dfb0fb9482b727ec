// Broadcast over a binomial tree (small messages: log2(P) depth) or a pipelined chain (large
// messages: every rank sends each byte once), chunked by mailbox payload.
//
// Signature check for every rank: a non-root rank checks the first message from its parent
// (dispatch compares signatures) and then sends an ack to its parent once its whole subtree
// has acked; the root, having all acks, sends a confirm down the tree. The root finishes after
// the acks and every rank after the confirm, so a rank called with other arguments fails the
// broadcast on every rank (the detecting rank tells all peers) instead of leaving some ranks
// with a success. The ack wave starts with the first chunk, so for large messages it overlaps
// the data and costs nothing; for one-chunk messages it adds one round trip up the tree.
#include <cstring>
#include <deque>
#include <vector>

#include "collectives/algorithms/algorithms.h"
#include "collectives/kernels/reduce_kernels.h"

namespace eagercomm::detail {
namespace {

class Broadcast final : public Op {
 public:
  Broadcast(OpSignature sig, void* buf)
      : Op(sig),
        buf_(static_cast<uint8_t*>(buf)),
        es_(dtype_size(static_cast<DataType>(sig.dtype))) {}

  Status start(OpContext& ctx) override {
    P_ = ctx.size;
    root_ = sig_.root;
    const int vr = (ctx.rank - root_ + P_) % P_;
    auto real = [&](int v) { return (v + root_) % P_; };
    if (static_cast<Algo>(sig_.reserved) == Algo::kChain) {
      parent_ = vr == 0 ? -1 : real(vr - 1);
      if (vr + 1 < P_) children_.push_back(real(vr + 1));
    } else {
      parent_ = vr == 0 ? -1 : real(vr & (vr - 1));
      const int low = vr == 0 ? 1 << 30 : (vr & -vr);
      int top = 1;
      while (top * 2 < P_) top *= 2;
      for (int m = top; m >= 1; m /= 2) {
        if (m < low && vr + m < P_) children_.push_back(real(vr + m));
      }
    }
    chunk_elems_ = ctx.mailbox->payload_capacity() / es_;
    nchunks_ = sig_.count == 0 ? 1 : (sig_.count + chunk_elems_ - 1) / chunk_elems_;
    return Status::Ok();
  }

  Status on_message(OpContext& ctx, const Received& r) override {
    const auto kind = static_cast<MsgKind>(r.header.kind);
    if (r.message->peer == parent_ && (kind == MsgKind::kData || kind == MsgKind::kConfirm)) {
      from_parent_.push_back(r);
      return Status::Ok();
    }
    bool is_child = false;
    for (int c : children_) is_child |= c == r.message->peer;
    if (is_child && kind == MsgKind::kAck) {
      ++acks_;
      ctx.mailbox->release(r.message);
      return Status::Ok();
    }
    return bad_message(*this, r.message->peer, "a broadcast message that does not fit the tree");
  }

  Result<int> advance(OpContext& ctx) override {
    if (P_ == 1) return 0;
    int steps = 0;
    if (parent_ < 0) {
      while (next_chunk_ < nchunks_) {
        SendSlot slot;
        if (!ctx.mailbox->try_acquire(children_[cursor_], &slot)) break;
        const Span c = chunk(next_chunk_);
        if (c.count) std::memcpy(slot.payload, buf_ + c.begin * es_, c.count * es_);
        EC_RETURN_IF_ERROR(send(ctx, slot, MsgKind::kData, 0, next_chunk_, 0, c.count * es_));
        ++steps;
        if (++cursor_ == children_.size()) {
          cursor_ = 0;
          ++next_chunk_;
        }
      }
    } else {
      EC_ASSIGN_OR_RETURN(const int n, process_parent(ctx));
      steps += n;
      if (!ack_sent_ && seen_data_ && acks_ == children_.size()) {
        SendSlot slot;
        if (ctx.mailbox->try_acquire(parent_, &slot)) {
          EC_RETURN_IF_ERROR(send(ctx, slot, MsgKind::kAck, 0, 0, 0, 0));
          ack_sent_ = true;
          ++steps;
        }
      }
    }
    if (parent_ < 0 && acks_ == children_.size()) confirming_ = true;
    if (confirming_) {
      EC_ASSIGN_OR_RETURN(const int n, send_confirms(ctx));
      steps += n;
    }
    return steps;
  }

  bool finished() const override {
    if (P_ == 1) return true;
    const bool confirmed = confirming_ && confirms_sent_ == children_.size();
    if (parent_ < 0) return next_chunk_ == nchunks_ && confirmed;
    return next_chunk_ == nchunks_ && ack_sent_ && confirmed;
  }

  void drop_held(OpContext& ctx) override {
    for (auto& r : from_parent_) ctx.mailbox->release(r.message);
    from_parent_.clear();
  }

 private:
  Span chunk(size_t j) const {
    const size_t begin = j * chunk_elems_;
    return Span{begin, std::min(chunk_elems_, sig_.count - std::min<size_t>(sig_.count, begin))};
  }

  Result<int> process_parent(OpContext& ctx) {
    int steps = 0;
    while (!from_parent_.empty()) {
      const Received& m = from_parent_.front();
      if (static_cast<MsgKind>(m.header.kind) == MsgKind::kConfirm) {
        // A parent sends the confirm after all of its chunks (per-pair FIFO keeps the order).
        if (next_chunk_ != nchunks_) {
          return bad_message(*this, parent_, "a broadcast confirm before the last chunk");
        }
        confirming_ = true;
        ctx.mailbox->release(m.message);
        from_parent_.pop_front();
        ++steps;
        continue;
      }
      if (m.header.a != next_chunk_)
        return bad_message(*this, parent_, "broadcast chunks out of order");
      const Span c = chunk(next_chunk_);
      const size_t bytes = c.count * es_;
      if (m.message->payload_bytes != bytes) {
        return bad_message(*this, parent_, "a broadcast chunk of the wrong size");
      }
      uint8_t* dst = buf_ + c.begin * es_;
      while (cursor_ < children_.size()) {
        SendSlot slot;
        if (!ctx.mailbox->try_acquire(children_[cursor_], &slot)) break;
        if (!copied_) {
          copy2(dst, slot.payload, m.message->payload, bytes);
          copied_ = true;
        } else if (bytes) {
          std::memcpy(slot.payload, dst, bytes);
        }
        EC_RETURN_IF_ERROR(send(ctx, slot, MsgKind::kData, 0, next_chunk_, 0, bytes));
        ++cursor_;
        ++steps;
      }
      if (cursor_ < children_.size()) break;  // waiting for a child's slot
      if (!copied_ && bytes) std::memcpy(dst, m.message->payload, bytes);
      ctx.mailbox->release(m.message);
      from_parent_.pop_front();
      seen_data_ = true;
      copied_ = false;
      cursor_ = 0;
      ++next_chunk_;
      ++steps;
    }
    return steps;
  }

  Result<int> send_confirms(OpContext& ctx) {
    int steps = 0;
    // Confirms go to the children after this rank's data to them (same per-pair FIFO), so a
    // child never sees the confirm before the chunks it still needs.
    if (parent_ >= 0 || next_chunk_ == nchunks_) {
      while (confirms_sent_ < children_.size()) {
        SendSlot slot;
        if (!ctx.mailbox->try_acquire(children_[confirms_sent_], &slot)) break;
        EC_RETURN_IF_ERROR(send(ctx, slot, MsgKind::kConfirm, 0, 0, 0, 0));
        ++confirms_sent_;
        ++steps;
      }
    }
    return steps;
  }

  uint8_t* buf_;
  size_t es_;
  int P_ = 1, root_ = 0, parent_ = -1;
  std::vector<int> children_;
  size_t chunk_elems_ = 1, nchunks_ = 1;
  size_t next_chunk_ = 0;  // root: next chunk to send; others: next chunk to receive
  size_t cursor_ = 0;      // next child to send the current chunk to
  bool copied_ = false;    // the head chunk is already in buf_
  bool seen_data_ = false;
  size_t acks_ = 0;
  bool ack_sent_ = false;
  bool confirming_ = false;
  size_t confirms_sent_ = 0;
  std::deque<Received> from_parent_;
};

}  // namespace

std::shared_ptr<Op> make_broadcast(OpSignature sig, void* buf) {
  return std::make_shared<Broadcast>(sig, buf);
}

}  // namespace eagercomm::detail
