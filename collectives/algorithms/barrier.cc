// Dissemination barrier: in round k rank r signals r + 2^k and waits for r - 2^k; after
// ceil(log2 P) rounds every rank has transitively heard from every other rank.
#include "collectives/algorithms/algorithms.h"

namespace eagercomm::detail {
namespace {

class Barrier final : public QueuedOp {
 public:
  explicit Barrier(OpSignature sig) : QueuedOp(sig) {}

  Status start(OpContext& ctx) override {
    init_queues(ctx);
    return Status::Ok();
  }

  Result<int> advance(OpContext& ctx) override {
    int steps = 0;
    while (distance_ < P_) {
      if (!sent_) {
        SendSlot slot;
        if (!ctx.mailbox->try_acquire((r_ + distance_) % P_, &slot)) return steps;
        EC_RETURN_IF_ERROR(send(ctx, slot, MsgKind::kData, round_, 0, 0, 0));
        sent_ = true;
        ++steps;
      }
      const int from = (r_ - distance_ % P_ + P_) % P_;
      if (queues_.empty(from)) return steps;
      const Received& m = queues_.front(from);
      if (m.header.kind != static_cast<uint32_t>(MsgKind::kData) || m.header.step != round_) {
        return bad_message(*this, from, "a barrier message for another round");
      }
      queues_.pop_release(ctx, from);
      distance_ *= 2;
      ++round_;
      sent_ = false;
      ++steps;
    }
    return steps;
  }

  bool finished() const override { return distance_ >= P_; }

 private:
  int distance_ = 1;
  uint32_t round_ = 0;
  bool sent_ = false;
};

}  // namespace

std::shared_ptr<Op> make_barrier(OpSignature sig) { return std::make_shared<Barrier>(sig); }

}  // namespace eagercomm::detail
