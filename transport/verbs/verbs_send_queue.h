// Internal: the send-queue bookkeeping of the verbs transport (verbs_transport.h). Not installed.
//
// How many send work requests a queue pair has in flight, which of them ask for a completion,
// and the write() calls waiting for theirs. A credit update asks for a completion once per
// kSignalEvery send requests: nobody waits for it, and each completion costs the NIC a DMA and
// poll() a read. A write() always asks (it owes its caller a kWriteDone with its cookie), and so
// does a notify(): close() must see the last ones (exit notices) executed, and a fence posted at
// close() to learn that would wait out the retries of a peer that closed first (the usual
// shutdown order). A completion also retires the unsignaled requests posted before it on that QP
// (they executed first: RC order).
//
// Pure bookkeeping (no verbs calls), driven by the transport's one thread, as verbs_credits.h.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace eagercomm::verbs {

inline constexpr uint32_t kSendDepth = 256;  // send work requests in flight per queue pair
inline constexpr uint32_t kSignalEvery = 32;
static_assert(kSignalEvery < kSendDepth / 2, "unsignaled requests must not fill the send queue");

// wr_id of a work request: a slot index (a write(): WriteSlots), or one of these bits with the
// peer in bits 0..31. A control request (a notify() or a credit update) carries in bits 32..47
// how many send requests its completion retires.
inline constexpr uint64_t kControlWr = 1ull << 63;
inline constexpr uint64_t kReceiveWr = 1ull << 62;  // a posted receive
inline uint64_t control_wr_id(int peer, uint32_t retires) {
  return kControlWr | (static_cast<uint64_t>(retires & 0xffff) << 32) | static_cast<uint32_t>(peer);
}
inline uint64_t receive_wr_id(int peer) { return kReceiveWr | static_cast<uint64_t>(peer); }

// Whether a send request asks for a completion: always (a write() or notify()), or once per
// kSignalEvery (a credit update).
enum class Signaling : uint8_t { kAlways, kBatched };

// Whether the next send request to a peer asks for a completion, and what that retires.
struct Signal {
  bool signaled;
  uint32_t retires;
};

// One queue pair's send queue.
class SendQueue {
 public:
  Signal next_signal(Signaling signaling) const {
    if (signaling == Signaling::kAlways || unsignaled_ + 1 >= kSignalEvery) {
      return {true, unsignaled_ + 1};
    }
    return {false, 1};  // seen only as an error or flush completion: the peer fails then
  }
  void on_posted(Signal signal) {
    ++sends_;
    unsignaled_ = signal.signaled ? 0 : unsignaled_ + 1;
  }
  // A send completion retired `n` requests.
  void retire(uint32_t n) { sends_ -= std::min(sends_, n); }
  // No room for one more request.
  bool full() const { return sends_ + 1 >= kSendDepth; }
  // Whether a request that asked for a completion has not had it yet (the unsignaled tail after
  // the last one is credit updates).
  bool awaits_signaled() const { return sends_ > unsignaled_; }
  uint32_t sends() const { return sends_; }  // not completed yet
  uint32_t unsignaled() const { return unsignaled_; }

 private:
  uint32_t sends_ = 0;       // send work requests not completed yet
  uint32_t unsignaled_ = 0;  // of those, the credit updates after the last signaled one
};

// The write() calls in flight, by slot index (their wr_id). A notify() has none: its completion
// is not a kWriteDone (defect 6).
class WriteSlots {
 public:
  struct Write {
    int peer;
    uint32_t tag;
    uint64_t cookie;
    uint32_t retires;  // send requests its completion retires (itself and unsignaled ones)
  };

  // The slot (wr_id) of a write about to be posted.
  uint32_t acquire(const Write& write) {
    uint32_t slot = 0;
    if (free_.empty()) {
      slot = static_cast<uint32_t>(slots_.size());
      slots_.push_back({});
    } else {
      slot = free_.back();
      free_.pop_back();
    }
    slots_[slot] = write;
    return slot;
  }
  void release(uint32_t slot) { free_.push_back(slot); }
  // Whether `wr_id` names a slot (ours always do; checked defensively).
  bool holds(uint64_t wr_id) const { return wr_id < slots_.size(); }
  const Write& operator[](uint64_t wr_id) const { return slots_[wr_id]; }

  // How many send requests the send completion of `wr_id` retires.
  uint32_t retired_by(uint64_t wr_id) const {
    if (wr_id & kControlWr) return static_cast<uint32_t>(wr_id >> 32) & 0xffff;
    return wr_id < slots_.size() ? slots_[wr_id].retires : 1;
  }

 private:
  std::vector<Write> slots_;
  std::vector<uint32_t> free_;
};

}  // namespace eagercomm::verbs
