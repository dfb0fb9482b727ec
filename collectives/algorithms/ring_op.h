// Internal: the pipeline shared by the ring collectives (allreduce, allgather).
//
// A rank receives only from its predecessor, in order, and sends only to its successor. Its own
// chunks enter the pipeline as credits allow, but only while at least two of the successor's
// slots are free, keeping one for forwarding: the ring then drains instead of filling up with
// starts. Received chunks are handled as they arrive and, where the algorithm says so, passed on
// in the same pass (reduce or copy straight into the successor's slot).
#pragma once

#include <deque>

#include "collectives/algorithms/algorithms.h"

namespace eagercomm::detail {

class RingOp : public Op {
 public:
  using Op::Op;

  Status on_message(OpContext& ctx, const Received& r) override;
  Result<int> advance(OpContext& ctx) override;
  bool finished() const override;
  void drop_held(OpContext& ctx) override;

 protected:
  // Call from start(): this rank's own chunks and how many messages it will receive.
  void init_ring(const OpContext& ctx, size_t own_chunks, size_t expected);
  // Handles the oldest received message (the base releases it afterwards). False: waiting for
  // a slot at the successor; the message stays queued.
  virtual Result<bool> process(OpContext& ctx, const Received& m) = 0;
  // Sends this rank's own chunk `index` through `slot`.
  virtual Status send_own(OpContext& ctx, const SendSlot& slot, size_t index) = 0;

  int P_ = 1, r_ = 0, pred_ = 0, succ_ = 0;

 private:
  std::deque<Received> inbound_;
  size_t own_chunks_ = 0, own_sent_ = 0;
  size_t expected_ = 0, processed_ = 0;
};

}  // namespace eagercomm::detail
