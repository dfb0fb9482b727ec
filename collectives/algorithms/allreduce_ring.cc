// Ring allreduce: a pipelined reduce-scatter followed by an allgather, for any P and count.
//
// The buffer is split into P segments (the first count % P get one more element) and each
// segment into chunks of at most one mailbox payload. A message sent at step s (0 .. 2P-3) by
// rank q carries a chunk of segment (q - s) mod P. Steps 0 .. P-2 reduce: the receiver combines
// the partial result with its own input and passes it on; at step P-2 the result is final and
// the receiver, the segment's owner, stores it and starts the allgather; steps P-1 .. 2P-3 copy.
// Each chunk is processed as soon as it arrives and the result is stored straight into the next
// rank's mailbox slot (one read of each input, one or two stores: the reduction fused with the
// transfer). The final value of every element is computed once, by its segment's owner, in a
// fixed order (a left fold along the ring), so every rank receives the same bits, and the
// caller's output only ever receives final values.
//
// Segments with no elements still send one empty chunk, so that every rank hears from every
// other rank and a mismatch in arguments is always detected.
#include <cstring>

#include "collectives/algorithms/ring_op.h"
#include "collectives/kernels/reduce_kernels.h"

namespace eagercomm::detail {
namespace {

class RingAllreduce final : public RingOp {
 public:
  RingAllreduce(OpSignature sig, const void* in, void* out)
      : RingOp(sig),
        in_(static_cast<const uint8_t*>(in)),
        out_(static_cast<uint8_t*>(out)),
        type_(static_cast<DataType>(sig.dtype)),
        op_(static_cast<ReduceOp>(sig.redop)),
        es_(dtype_size(type_)) {}

  Status start(OpContext& ctx) override {
    P_ = ctx.size;
    r_ = ctx.rank;
    chunk_elems_ = ctx.mailbox->payload_capacity() / es_;
    if (P_ == 1 && out_ != in_ && sig_.count > 0) std::memcpy(out_, in_, sig_.count * es_);
    size_t expected = 0;
    for (int s = 0; s <= 2 * P_ - 3; ++s) expected += chunks(segment_received(s));
    init_ring(ctx, chunks(r_), expected);
    return Status::Ok();
  }

 private:
  // Segment whose chunks this rank receives at step s.
  int segment_received(int s) const { return ((r_ - 1 - s) % P_ + P_) % P_; }
  Span segment(int g) const { return split(sig_.count, P_, g); }
  size_t chunks(int g) const {
    const size_t n = segment(g).count;
    return n == 0 ? 1 : (n + chunk_elems_ - 1) / chunk_elems_;
  }
  Span chunk(int g, size_t j) const {
    const Span seg = segment(g);
    const size_t begin = j * chunk_elems_;
    return Span{seg.begin + begin, std::min(chunk_elems_, seg.count - std::min(seg.count, begin))};
  }

  Status send_own(OpContext& ctx, const SendSlot& slot, size_t j) override {
    const Span c = chunk(r_, j);
    if (c.count && !ctx.elided(c.count * es_)) {
      std::memcpy(slot.payload, in_ + c.begin * es_, c.count * es_);
    }
    return send(ctx, slot, MsgKind::kData, 0, r_, j, c.count * es_);
  }

  Result<bool> process(OpContext& ctx, const Received& m) override {
    const int s = static_cast<int>(m.header.step);
    if (m.header.kind != static_cast<uint32_t>(MsgKind::kData) || s > 2 * P_ - 3) {
      return bad_message(*this, pred_, "a ring message with a bad kind or step");
    }
    const int g = segment_received(s);
    if (m.header.a != static_cast<uint64_t>(g) || m.header.b >= chunks(g)) {
      return bad_message(*this, pred_, "a ring chunk of the wrong segment");
    }
    const Span c = chunk(g, m.header.b);
    const size_t bytes = c.count * es_;
    if (m.message->payload_bytes != bytes) {
      return bad_message(*this, pred_, "a ring chunk of the wrong size");
    }
    const bool last = s == 2 * P_ - 3;
    SendSlot slot;
    if (!last && !ctx.mailbox->try_acquire(succ_, &slot)) return false;
    const uint8_t* partial = m.message->payload;
    const uint8_t* mine = in_ + c.begin * es_;
    uint8_t* dst = out_ + c.begin * es_;
    if (ctx.elided(bytes)) {
      // Nothing to combine: the payload's values were not delivered (TransportCaps).
    } else if (s < P_ - 2) {
      reduce(type_, op_, slot.payload, partial, mine, c.count);
    } else if (s == P_ - 2) {
      reduce2(type_, op_, dst, slot.payload, partial, mine, c.count);
    } else if (!last) {
      copy2(dst, slot.payload, partial, bytes);
    } else if (bytes) {
      std::memcpy(dst, partial, bytes);
    }
    if (!last) EC_RETURN_IF_ERROR(send(ctx, slot, MsgKind::kData, s + 1, g, m.header.b, bytes));
    return true;
  }

  const uint8_t* in_;
  uint8_t* out_;
  DataType type_;
  ReduceOp op_;
  size_t es_;
  size_t chunk_elems_ = 1;
};

}  // namespace

std::shared_ptr<Op> make_ring_allreduce(OpSignature sig, const void* in, void* out) {
  return std::make_shared<RingAllreduce>(sig, in, out);
}

size_t rd_max_bytes_at(const Config& config, int size) {
  if (size <= 8) return config.rd_max_bytes;
  int log2p = 0;
  while ((1 << (log2p + 1)) <= size) ++log2p;
  // EAGERCOMM_RD_MAX_BYTES <= 64 MiB (2^26) times less than 2^32: no overflow.
  return config.rd_max_bytes * static_cast<size_t>(2 * (size - 1) - log2p) / 11;
}

Algo choose_allreduce(const Config& config, int size, size_t bytes, size_t payload_capacity,
                      bool maps_peer_memory, size_t small_max_bytes) {
  const bool fits = bytes <= payload_capacity;
  const bool mapped = config.direct && maps_peer_memory;
  switch (config.allreduce_algo) {
    case AllreduceAlgo::kAuto:
      if (small_max_bytes > 0 && bytes <= small_max_bytes) return Algo::kSmall;
      if (fits && bytes <= rd_max_bytes_at(config, size)) return Algo::kRecursiveDoubling;
      if (mapped && bytes >= config.direct_min_bytes) return Algo::kDirect;
      return Algo::kRing;
    case AllreduceAlgo::kRecursiveDoubling:
      return fits ? Algo::kRecursiveDoubling : Algo::kRing;  // too large for one slot: ring
    case AllreduceAlgo::kDirect:
      return mapped ? Algo::kDirect : Algo::kRing;  // the transport cannot: ring
    case AllreduceAlgo::kRing:
      break;
  }
  return Algo::kRing;
}

std::shared_ptr<Op> make_allreduce(OpSignature sig, const void* in, void* out) {
  switch (static_cast<Algo>(sig.reserved)) {
    case Algo::kRecursiveDoubling:
      return make_rd_allreduce(sig, in, out);
    case Algo::kDirect:
      return make_direct_allreduce(sig, in, out);
    case Algo::kSmall:
      return make_small_allreduce(sig, in, out);
    default:
      return make_ring_allreduce(sig, in, out);
  }
}

Status bad_message(const Op& op, int peer, const char* what) {
  return make_status(StatusCode::kProtocolError, "%s #%llu: rank %d sent %s",
                     describe(op.sig()).c_str(), static_cast<unsigned long long>(key_seq(op.key())),
                     peer, what);
}

}  // namespace eagercomm::detail
