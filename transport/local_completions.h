// The write completions a memory-copying transport (inproc, shm) knows at once: write() finishes
// the copy itself, and the completion waits here for the next poll().
//
// push() and drain() belong to the driver thread (the one calling write() and poll()); any()
// may be called from any thread, for wait() to see that there is work.
#pragma once

#include <atomic>
#include <cstddef>
#include <span>
#include <vector>

#include "transport/transport.h"

namespace eagercomm {

class LocalCompletions {
 public:
  void push(const TransportCompletion& c) {
    items_.push_back(c);
    pending_.fetch_add(1, std::memory_order_release);
  }
  // Moves up to out.size() completions to the front of `out`, oldest first; returns how many.
  size_t drain(std::span<TransportCompletion> out) {
    size_t n = 0;
    while (n < out.size() && head_ < items_.size()) out[n++] = items_[head_++];
    if (n) pending_.fetch_sub(n, std::memory_order_relaxed);
    if (head_ == items_.size()) {
      items_.clear();
      head_ = 0;
    }
    return n;
  }
  bool any() const { return pending_.load(std::memory_order_acquire) > 0; }

 private:
  std::vector<TransportCompletion> items_;
  size_t head_ = 0;
  std::atomic<size_t> pending_{0};
};

}  // namespace eagercomm
