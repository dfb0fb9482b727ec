// Completions a transport knows outside its poll(): the writes a memory-copying transport
// (inproc, shm, ucx's rings) finishes itself, what UCX's callbacks report, peer errors found
// while posting (verbs). They wait here for the next poll().
//
// push(), drain() and size() belong to the driver thread (the one calling write() and poll());
// any() may be called from any thread, for wait() to see that there is work. The counter any()
// reads has that one writer, so it is kept with a load and a store, not a read-modify-write
// (a locked instruction per write on the hot path).
#pragma once

#include <atomic>
#include <cstddef>
#include <span>
#include <vector>

#include "transport/transport.h"

namespace eagercomm {

class LocalCompletions {
 public:
  // Field by field into the queue: a completion built on the stack and then copied is a wide load
  // of narrow stores, which x86 cannot forward, so the load waits until those stores commit; in
  // a write() they sit behind the store into the peer's memory, which waits for its cache line
  // (perf showed that load as the hottest instruction of ucx's write path).
  void push(TransportCompletion::Kind kind, int peer, uint32_t tag, uint64_t cookie) {
    TransportCompletion& c = items_.emplace_back();
    c.kind = kind;
    c.peer = peer;
    c.tag = tag;
    c.cookie = cookie;
    pending_.store(pending_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }
  void push(const TransportCompletion& c) { push(c.kind, c.peer, c.tag, c.cookie); }
  // Moves up to out.size() completions to the front of `out`, oldest first; returns how many.
  size_t drain(std::span<TransportCompletion> out) {
    if (head_ == items_.size()) return 0;
    size_t n = 0;
    while (n < out.size() && head_ < items_.size()) out[n++] = items_[head_++];
    pending_.store(pending_.load(std::memory_order_relaxed) - n, std::memory_order_relaxed);
    if (head_ == items_.size()) {
      items_.clear();
      head_ = 0;
    }
    return n;
  }
  size_t size() const { return items_.size() - head_; }  // driver only
  bool any() const { return pending_.load(std::memory_order_acquire) > 0; }

 private:
  std::vector<TransportCompletion> items_;
  size_t head_ = 0;
  std::atomic<size_t> pending_{0};
};

}  // namespace eagercomm
