// Receive credits of the verbs transport: every RDMA_WRITE_WITH_IMM consumes one receive work
// request at the target, and one that finds none there fails the queue pair (receiver not
// ready). So a sender only sends while the target has a receive posted for it.
//
// The scheme: the target posts `window` receives per sender up front and reposts each one as it
// completes. It tells the sender how many it has posted *in total* by an RDMA write (no
// immediate, so it consumes no receive) of that 64-bit count into a word of the sender's memory.
// A cumulative count, not a delta, makes lost or reordered updates harmless and lets the sender
// check it: the count never goes back and never exceeds what the sender sent plus the window
// (a peer that claims more is corrupt or hostile, and is refused, not believed).
//
// Pure bookkeeping (no verbs calls): the transport owns one SendCredits and one ReturnCredits
// per peer and is driven by one thread (the transport contract), so nothing here is atomic.
#pragma once

#include <cstdint>

namespace eagercomm::verbs {

// The sender's side, per peer.
class SendCredits {
 public:
  explicit SendCredits(uint32_t window) : window_(window), granted_(window) {}

  bool can_send() const { return sent_ < granted_; }
  uint64_t available() const { return granted_ - sent_; }
  // Call for every notification posted (after can_send() said yes).
  void on_sent() { ++sent_; }
  uint64_t sent() const { return sent_; }

  // A count read from the peer's credit word. False when it is impossible (went back, or past
  // sent + window); the caller treats the peer as failed.
  bool update(uint64_t posted_total) {
    if (posted_total < granted_ || posted_total > sent_ + window_) return false;
    granted_ = posted_total;
    return true;
  }

 private:
  uint32_t window_;
  uint64_t granted_;  // receives the peer has posted for us, in total
  uint64_t sent_ = 0;
};

// The target's side, per sender: counts reposted receives and says when the sender should be
// told. Publishing every repost would double the traffic of small messages; publishing too
// rarely stalls the sender. Every `window / 4` reposts (at least 1), or when the sender may be
// down to its last quarter (it cannot send more than the window ahead of our last update).
class ReturnCredits {
 public:
  explicit ReturnCredits(uint32_t window)
      : posted_(window), published_(window), batch_(window / 4 > 0 ? window / 4 : 1) {}

  // A receive of this sender completed and was posted again.
  void on_reposted() { ++posted_; }
  uint64_t posted() const { return posted_; }

  // Whether the count should be written to the sender now.
  bool due() const { return posted_ - published_ >= batch_; }
  // The count to write; call when the write was posted.
  uint64_t publish() {
    published_ = posted_;
    return posted_;
  }

 private:
  uint64_t posted_;
  uint64_t published_;
  uint64_t batch_;
};

}  // namespace eagercomm::verbs
