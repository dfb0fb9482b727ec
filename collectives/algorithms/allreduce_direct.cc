// Direct allreduce for ranks that share an address space (the transport maps peers' memory):
// instead of pushing chunks through mailboxes, every rank owns one segment, reads that segment
// of every rank's input block by block, reduces it in cache, and stores the result straight
// into every rank's output. One pass: each rank reads S and writes S bytes for an S-byte
// buffer, against about 2.5 S of each for the ring through mailboxes. In one process memory
// bandwidth is the limit (two cores here copy about 1.5x what one does), so that is the
// difference between reaching and missing half the memcpy bandwidth.
//
// Only the owner of a segment ever reads or writes that segment of any buffer, so in-place
// calls are safe: an owner overwrites an input block only after it has read it. Two messages
// per peer pair order the rest:
//   step 0  keys: remote keys of this rank's input and output (carries the signature, so a
//           mismatch is caught before anyone reads or writes a buffer);
//   step 1  segment done: this rank has stored its segment into every output and stopped
//           reading the inputs; when a rank has step 1 from every peer, its output is complete
//           and nobody touches its buffers any more, so the call may return.
// Each segment is computed by exactly one rank, so every rank holds the same bits.
#include <cstring>
#include <span>
#include <vector>

#include "collectives/algorithms/algorithms.h"
#include "collectives/engine/stream_copy.h"
#include "collectives/kernels/reduce_kernels.h"

namespace eagercomm::detail {
namespace {

// Reduces in blocks that stay in cache while the peers' inputs stream past.
constexpr size_t kBlockBytes = 64 * 1024;
// From this size on, results go to out-of-place outputs with streaming stores: they would not
// stay in cache anyway, and skipping the read-for-ownership saves a third of the store traffic.
// In-place outputs are the very lines the owner just read, already in its cache: plain stores
// are cheaper there. Below the threshold, plain stores leave the result in cache for the
// caller. (Measured on this machine, 64 MiB f32: streaming took out-of-place 2 ranks from 57% to
// 75-85% of the memcpy bandwidth and 4 ranks from 42% to 50-57%; in place it helped nothing.)
constexpr size_t kStreamMinBytes = 8 * 1024 * 1024;

class DirectAllreduce final : public QueuedOp {
 public:
  DirectAllreduce(OpSignature sig, const void* in, void* out)
      : QueuedOp(sig),
        in_(static_cast<const uint8_t*>(in)),
        out_(static_cast<uint8_t*>(out)),
        type_(static_cast<DataType>(sig.dtype)),
        op_(static_cast<ReduceOp>(sig.redop)),
        es_(dtype_size(type_)),
        bytes_(sig.count * es_) {}

  Status start(OpContext& ctx) override {
    init_queues(ctx);
    if (P_ == 1) {
      if (out_ != in_ && bytes_) std::memcpy(out_, in_, bytes_);
      phase_ = Phase::kDone;
      return Status::Ok();
    }
    if (!ctx.transport->maps_peer_memory()) {
      return make_status(StatusCode::kNotSupported,
                         "direct allreduce needs a transport that maps peers' memory");
    }
    EC_ASSIGN_OR_RETURN(in_region_, ctx.transport->register_memory(const_cast<uint8_t*>(in_),
                                                                   bytes_, MemoryKind::kHost));
    EC_ASSIGN_OR_RETURN(out_region_,
                        ctx.transport->register_memory(out_, bytes_, MemoryKind::kHost));
    keys_.clear();
    append_key(in_region_->remote_key());
    append_key(out_region_->remote_key());
    if (keys_.size() > ctx.mailbox->payload_capacity()) {
      return make_status(StatusCode::kInternal, "remote keys do not fit a mailbox slot");
    }
    peer_in_.assign(P_, nullptr);
    peer_out_.assign(P_, nullptr);
    remotes_.clear();
    sent_.assign(P_, 0);
    done_from_.assign(P_, false);
    got_ = 0;
    return Status::Ok();
  }

  Result<int> advance(OpContext& ctx) override {
    int steps = 0;
    if (phase_ == Phase::kKeys) {
      EC_ASSIGN_OR_RETURN(const int sent, send_step(ctx, 0));
      EC_ASSIGN_OR_RETURN(const int got, take_keys(ctx));
      steps += sent + got;
      if (got_ < P_ - 1) return steps;
      reduce_and_scatter();
      phase_ = Phase::kSegmentDone;
      got_ = 0;
      ++steps;
    }
    if (phase_ == Phase::kSegmentDone) {
      EC_ASSIGN_OR_RETURN(const int sent, send_step(ctx, 1));
      steps += sent;
      for (int q = 0; q < P_; ++q) {
        if (q == r_ || done_from_[q] || queues_.empty(q)) continue;
        EC_RETURN_IF_ERROR(expect_step(q, 1));
        queues_.pop_release(ctx, q);
        done_from_[q] = true;
        ++got_;
        ++steps;
      }
      if (got_ == P_ - 1 && all_sent(1)) phase_ = Phase::kDone;
    }
    return steps;
  }

  bool finished() const override { return phase_ == Phase::kDone; }

  bool shares_buffers() const override { return true; }

  std::vector<int> peers_using_buffers() const override {
    std::vector<int> out;
    for (int q = 0; q < P_ && phase_ != Phase::kDone; ++q) {
      if (q == r_ || sent_.empty() || sent_[q] == 0 || done_from_[q]) continue;
      if (!queues_.holds(q, 1)) out.push_back(q);  // its "segment done" has not come in yet
    }
    return out;
  }

 private:
  enum class Phase { kKeys, kSegmentDone, kDone };

  void append_key(const std::vector<uint8_t>& key) {
    const uint32_t n = static_cast<uint32_t>(key.size());
    const auto* p = reinterpret_cast<const uint8_t*>(&n);
    keys_.insert(keys_.end(), p, p + sizeof(n));
    keys_.insert(keys_.end(), key.begin(), key.end());
  }

  bool all_sent(uint32_t step) const {
    for (int q = 0; q < P_; ++q) {
      if (q != r_ && sent_[q] <= step) return false;
    }
    return true;
  }

  // Sends every peer the messages up to `step` it has not had yet, in step order, as credits
  // allow. (The keys may still be waiting for a credit when the peers' keys are all in.)
  Result<int> send_step(OpContext& ctx, uint32_t step) {
    int sent = 0;
    for (int q = 0; q < P_; ++q) {
      while (q != r_ && sent_[q] <= step) {
        SendSlot slot;
        if (!ctx.mailbox->try_acquire(q, &slot)) break;
        const size_t n = sent_[q] == 0 ? keys_.size() : 0;
        if (n) std::memcpy(slot.payload, keys_.data(), n);
        EC_RETURN_IF_ERROR(send(ctx, slot, MsgKind::kData, sent_[q], 0, 0, n));
        ++sent_[q];
        ++sent;
      }
    }
    return sent;
  }

  Status expect_step(int q, uint32_t step) {
    const Received& m = queues_.front(q);
    if (m.header.kind != static_cast<uint32_t>(MsgKind::kData) || m.header.step != step) {
      return bad_message(*this, q, "a direct-allreduce message out of order");
    }
    return Status::Ok();
  }

  Result<int> take_keys(OpContext& ctx) {
    int got = 0;
    for (int q = 0; q < P_; ++q) {
      if (q == r_ || peer_in_[q] || queues_.empty(q)) continue;
      EC_RETURN_IF_ERROR(expect_step(q, 0));
      const InMessage& m = *queues_.front(q).message;
      std::span<const uint8_t> rest(m.payload, m.payload_bytes);
      uint8_t* mapped[2] = {nullptr, nullptr};  // input, output
      for (uint8_t*& dst : mapped) {
        uint32_t n = 0;
        if (rest.size() < sizeof(n)) return bad_message(*this, q, "truncated remote keys");
        std::memcpy(&n, rest.data(), sizeof(n));
        if (rest.size() - sizeof(n) < n) return bad_message(*this, q, "truncated remote keys");
        EC_ASSIGN_OR_RETURN(std::unique_ptr<RemoteRegion> remote,
                            ctx.transport->import_region(q, rest.subspan(sizeof(n), n)));
        if (remote->size() != bytes_) return bad_message(*this, q, "a buffer of the wrong size");
        dst = static_cast<uint8_t*>(ctx.transport->mapped_address(*remote));
        remotes_.push_back(std::move(remote));
        rest = rest.subspan(sizeof(n) + n);
      }
      if (bytes_ && (!mapped[0] || !mapped[1])) {
        return make_status(StatusCode::kInternal, "transport did not map rank %d's buffers", q);
      }
      // A zero-byte buffer maps to nothing; mark the peer as seen all the same.
      static uint8_t empty;
      peer_in_[q] = bytes_ ? mapped[0] : &empty;
      peer_out_[q] = mapped[1];
      queues_.pop_release(ctx, q);
      ++got_;
      ++got;
    }
    return got;
  }

  const uint8_t* input_of(int q) const { return q == r_ ? in_ : peer_in_[q]; }

  // Reduces this rank's segment block by block into a cached scratch block (own input first)
  // and stores each finished block into every output, this rank's included.
  void reduce_and_scatter() {
    const Span seg = split(sig_.count, P_, r_);
    const size_t block = std::max<size_t>(1, kBlockBytes / es_);
    const bool large = bytes_ >= kStreamMinBytes;
    bool streamed = false;
    scratch_.resize(std::min(block, seg.count) * es_);
    for (size_t done = 0; done < seg.count; done += block) {
      const size_t n = std::min(block, seg.count - done);
      const size_t off = (seg.begin + done) * es_;
      uint8_t* acc = scratch_.data();
      bool first = true;
      for (int q = 0; q < P_; ++q) {
        if (q == r_) continue;
        reduce(type_, op_, acc, first ? in_ + off : acc, peer_in_[q] + off, n);
        first = false;
      }
      for (int q = 0; q < P_; ++q) {
        uint8_t* out = q == r_ ? out_ : peer_out_[q];
        const uint8_t* in = q == r_ ? in_ : peer_in_[q];
        if (large && out != in) {
          stream_copy(out + off, acc, n * es_);
          streamed = true;
        } else {
          std::memcpy(out + off, acc, n * es_);
        }
      }
    }
    // Streaming stores are weakly ordered: make them visible before "segment done" goes out.
    if (streamed) stream_fence();
  }

  const uint8_t* in_;
  uint8_t* out_;
  DataType type_;
  ReduceOp op_;
  size_t es_;
  size_t bytes_;
  Phase phase_ = Phase::kKeys;
  std::unique_ptr<MemoryRegion> in_region_, out_region_;
  std::vector<std::unique_ptr<RemoteRegion>> remotes_;
  std::vector<uint8_t> keys_;
  std::vector<uint8_t> scratch_;
  std::vector<const uint8_t*> peer_in_;
  std::vector<uint8_t*> peer_out_;
  std::vector<uint32_t> sent_;   // per peer: steps sent so far
  std::vector<bool> done_from_;  // per peer: its segment is in our output, our buffers are free
  int got_ = 0;
};

}  // namespace

std::shared_ptr<Op> make_direct_allreduce(OpSignature sig, const void* in, void* out) {
  return std::make_shared<DirectAllreduce>(sig, in, out);
}

}  // namespace eagercomm::detail
