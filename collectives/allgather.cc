// Ring allgather: rank r's block travels around the ring, chunked by mailbox payload; each
// rank stores every block it receives and passes it on in the same pass (copy2), P-1 steps.
// Blocks of zero elements still travel as one empty chunk, so every rank hears from every
// other one and mismatched arguments are always detected.
#include <cstring>
#include <deque>

#include "collectives/algorithms.h"
#include "collectives/reduce_kernels.h"

namespace eagercomm::detail {
namespace {

class RingAllgather final : public Op {
 public:
  RingAllgather(OpSignature sig, const void* in, void* out)
      : Op(sig),
        in_(static_cast<const uint8_t*>(in)),
        out_(static_cast<uint8_t*>(out)),
        es_(dtype_size(static_cast<DataType>(sig.dtype))) {}

  Status start(OpContext& ctx) override {
    P_ = ctx.size;
    r_ = ctx.rank;
    const size_t block = sig_.count * es_;
    uint8_t* mine = out_ + static_cast<size_t>(r_) * block;
    if (mine != in_ && block) std::memcpy(mine, in_, block);
    if (P_ == 1) return Status::Ok();
    pred_ = (r_ + P_ - 1) % P_;
    succ_ = (r_ + 1) % P_;
    chunk_elems_ = ctx.mailbox->payload_capacity() / es_;
    nchunks_ = sig_.count == 0 ? 1 : (sig_.count + chunk_elems_ - 1) / chunk_elems_;
    expected_ = static_cast<size_t>(P_ - 1) * nchunks_;
    return Status::Ok();
  }

  Status on_message(OpContext& ctx, const Received& r) override {
    (void)ctx;
    if (r.message->peer != pred_) {
      return bad_message(*this, r.message->peer, "ring data from a rank that is not the predecessor");
    }
    inbound_.push_back(r);
    return Status::Ok();
  }

  Result<int> advance(OpContext& ctx) override {
    if (P_ == 1) return 0;
    int steps = 0;
    for (;;) {
      if (!inbound_.empty()) {
        EC_ASSIGN_OR_RETURN(const bool did, process_head(ctx));
        if (did) {
          ++steps;
          continue;
        }
      }
      if (init_sent_ < nchunks_ && ctx.mailbox->credits(succ_) >= 2) {
        SendSlot slot;
        ctx.mailbox->try_acquire(succ_, &slot);
        const Span c = chunk(init_sent_);
        const uint8_t* src = out_ + (static_cast<size_t>(r_) * sig_.count + c.begin) * es_;
        if (c.count) std::memcpy(slot.payload, src, c.count * es_);
        EC_RETURN_IF_ERROR(send(ctx, slot, MsgKind::kData, 0, r_, init_sent_, c.count * es_));
        ++init_sent_;
        ++steps;
        continue;
      }
      return steps;
    }
  }

  bool finished() const override {
    return P_ == 1 || (processed_ == expected_ && init_sent_ == nchunks_);
  }

  void drop_held(OpContext& ctx) override {
    for (auto& r : inbound_) ctx.mailbox->release(r.message);
    inbound_.clear();
  }

 private:
  Span chunk(size_t j) const {
    const size_t begin = j * chunk_elems_;
    return Span{begin, std::min(chunk_elems_, sig_.count - std::min<size_t>(sig_.count, begin))};
  }

  Result<bool> process_head(OpContext& ctx) {
    const Received& m = inbound_.front();
    const int s = static_cast<int>(m.header.step);
    if (m.header.kind != static_cast<uint32_t>(MsgKind::kData) || s > P_ - 2) {
      return bad_message(*this, pred_, "an allgather message with a bad kind or step");
    }
    const int g = ((r_ - 1 - s) % P_ + P_) % P_;
    if (m.header.a != static_cast<uint64_t>(g) || m.header.b >= nchunks_) {
      return bad_message(*this, pred_, "an allgather chunk of the wrong block");
    }
    const Span c = chunk(m.header.b);
    const size_t bytes = c.count * es_;
    if (m.message->payload_bytes != bytes) {
      return bad_message(*this, pred_, "an allgather chunk of the wrong size");
    }
    const bool last = s == P_ - 2;
    uint8_t* dst = out_ + (static_cast<size_t>(g) * sig_.count + c.begin) * es_;
    if (last) {
      if (bytes) std::memcpy(dst, m.message->payload, bytes);
    } else {
      SendSlot slot;
      if (!ctx.mailbox->try_acquire(succ_, &slot)) return false;
      copy2(dst, slot.payload, m.message->payload, bytes);
      EC_RETURN_IF_ERROR(send(ctx, slot, MsgKind::kData, s + 1, g, m.header.b, bytes));
    }
    ctx.mailbox->release(m.message);
    inbound_.pop_front();
    ++processed_;
    return true;
  }

  const uint8_t* in_;
  uint8_t* out_;
  size_t es_;
  int P_ = 1, r_ = 0, pred_ = 0, succ_ = 0;
  size_t chunk_elems_ = 1, nchunks_ = 1;
  size_t expected_ = 0, processed_ = 0, init_sent_ = 0;
  std::deque<Received> inbound_;
};

}  // namespace

std::shared_ptr<Op> make_ring_allgather(OpSignature sig, const void* in, void* out) {
  return std::make_shared<RingAllgather>(sig, in, out);
}

}  // namespace eagercomm::detail
