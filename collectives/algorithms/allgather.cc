// Ring allgather: rank r's block travels around the ring, chunked by mailbox payload; each
// rank stores every block it receives and passes it on in the same pass (copy2), P-1 steps.
// Blocks of zero elements still travel as one empty chunk, so every rank hears from every
// other one and mismatched arguments are always detected.
#include <cstring>

#include "collectives/algorithms/ring_op.h"
#include "collectives/kernels/reduce_kernels.h"

namespace eagercomm::detail {
namespace {

class RingAllgather final : public RingOp {
 public:
  RingAllgather(OpSignature sig, const void* in, void* out)
      : RingOp(sig),
        in_(static_cast<const uint8_t*>(in)),
        out_(static_cast<uint8_t*>(out)),
        es_(dtype_size(static_cast<DataType>(sig.dtype))) {}

  Status start(OpContext& ctx) override {
    const size_t block = sig_.count * es_;
    uint8_t* mine = out_ + static_cast<size_t>(ctx.rank) * block;
    if (mine != in_ && block) std::memcpy(mine, in_, block);
    chunk_elems_ = ctx.mailbox->payload_capacity() / es_;
    nchunks_ = sig_.count == 0 ? 1 : (sig_.count + chunk_elems_ - 1) / chunk_elems_;
    init_ring(ctx, nchunks_, static_cast<size_t>(ctx.size - 1) * nchunks_);
    return Status::Ok();
  }

 private:
  Span chunk(size_t j) const {
    const size_t begin = j * chunk_elems_;
    return Span{begin, std::min(chunk_elems_, sig_.count - std::min<size_t>(sig_.count, begin))};
  }

  Status send_own(OpContext& ctx, const SendSlot& slot, size_t j) override {
    const Span c = chunk(j);
    const uint8_t* src = out_ + (static_cast<size_t>(r_) * sig_.count + c.begin) * es_;
    if (c.count) std::memcpy(slot.payload, src, c.count * es_);
    return send(ctx, slot, MsgKind::kData, 0, r_, j, c.count * es_);
  }

  Result<bool> process(OpContext& ctx, const Received& m) override {
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
    uint8_t* dst = out_ + (static_cast<size_t>(g) * sig_.count + c.begin) * es_;
    if (s == P_ - 2) {
      if (bytes) std::memcpy(dst, m.message->payload, bytes);
      return true;
    }
    SendSlot slot;
    if (!ctx.mailbox->try_acquire(succ_, &slot)) return false;
    copy2(dst, slot.payload, m.message->payload, bytes);
    EC_RETURN_IF_ERROR(send(ctx, slot, MsgKind::kData, s + 1, g, m.header.b, bytes));
    return true;
  }

  const uint8_t* in_;
  uint8_t* out_;
  size_t es_;
  size_t chunk_elems_ = 1, nchunks_ = 1;
};

}  // namespace

std::shared_ptr<Op> make_ring_allgather(OpSignature sig, const void* in, void* out) {
  return std::make_shared<RingAllgather>(sig, in, out);
}

}  // namespace eagercomm::detail
