// MpscQueue<T>: intrusive, unbounded, multi-producer single-consumer FIFO (Dmitry Vyukov's
// node-based queue). Application threads submit operations through it; the progress engine
// drains it.
//
// Promises:
//  - push() is wait-free: one atomic exchange and one store, no allocation, any thread.
//  - pop() and empty() belong to the single consumer. Several threads may take turns as the
//    consumer (the engine's thread may change), but the hand-over must be synchronised by the
//    caller (a mutex, a join, a release/acquire flag); two concurrent consumers are a bug.
//  - FIFO per producer; nodes of different producers are ordered by their exchange on the head.
//  - The queue never owns nodes: a node must stay alive (and must not be pushed again) from
//    push() until pop() has returned it. Destroying the queue leaves any queued nodes alone.
//
// The one caveat: a push is "visible" only once its second step (linking the previous node to
// it) is done. A producer pre-empted between its two steps makes pop() return nullptr even
// though that node -- and any node pushed after it -- is in the queue. Nothing is lost: the
// producer's own wake-up after push (EventCount::notify_all()) makes the consumer look again,
// and empty() already reports the queue as non-empty during that window, so a consumer that
// re-checks with empty() before blocking does not fall asleep on it.
#pragma once

#include <atomic>
#include <type_traits>

namespace eagercomm {

// Base of every node that travels through an MpscQueue. Embed it (derive from it) in the
// operation object: the queue links nodes through mpsc_next and allocates nothing.
struct MpscNode {
  std::atomic<MpscNode*> mpsc_next{nullptr};
};

template <class T>
class MpscQueue {
 public:
  MpscQueue() {
    static_assert(std::is_base_of_v<MpscNode, T>, "MpscQueue<T>: T must derive from MpscNode");
  }
  MpscQueue(const MpscQueue&) = delete;
  MpscQueue& operator=(const MpscQueue&) = delete;
  MpscQueue(MpscQueue&&) = delete;
  MpscQueue& operator=(MpscQueue&&) = delete;

  // Appends `node` (not null). Any thread; wait-free.
  void push(T* node) { push_node(static_cast<MpscNode*>(node)); }

  // Removes and returns the oldest node, or nullptr when the queue is empty or the next node's
  // producer has not finished its push yet (see the caveat above). Consumer only.
  T* pop() {
    MpscNode* tail = tail_;
    MpscNode* next = tail->mpsc_next.load(std::memory_order_acquire);
    if (tail == &stub_) {
      // The stub is never handed out: skip over it.
      if (next == nullptr) return nullptr;
      tail_ = next;
      tail = next;
      next = next->mpsc_next.load(std::memory_order_acquire);
    }
    if (next != nullptr) {
      tail_ = next;
      return static_cast<T*>(tail);
    }
    // `tail` is the last linked node. Handing it out would leave the queue without a node to
    // link the next push to, so re-insert the stub behind it first -- unless a producer has
    // already swapped itself in after `tail` and has yet to link it: then wait for it.
    if (tail != head_.load(std::memory_order_acquire)) return nullptr;
    push_node(&stub_);
    next = tail->mpsc_next.load(std::memory_order_acquire);
    if (next != nullptr) {
      tail_ = next;
      return static_cast<T*>(tail);
    }
    // Another producer got between our look at the head and the stub's push.
    return nullptr;
  }

  // True when nothing has been pushed that pop() has not returned. Consumer only. Conservative
  // in the useful direction: a push that is half done already counts as "not empty".
  bool empty() const { return tail_ == &stub_ && head_.load(std::memory_order_acquire) == &stub_; }

 private:
  // Producers only touch head_ (and the previous node); the consumer owns tail_ and the stub.
  // Keeping them on separate cache lines stops every push from stealing the consumer's line.
  static constexpr size_t kCacheLine = 64;

  void push_node(MpscNode* node) {
    node->mpsc_next.store(nullptr, std::memory_order_relaxed);
    // acq_rel: release publishes the node (and its payload) to the next producer and to the
    // consumer's head check; acquire orders our link store below after the previous producer's
    // `mpsc_next = nullptr` on `prev`, so that store can not overwrite our link.
    MpscNode* prev = head_.exchange(node, std::memory_order_acq_rel);
    // Between the exchange and this store the node is in the queue but unreachable from tail_.
    prev->mpsc_next.store(node, std::memory_order_release);
  }

  alignas(kCacheLine) std::atomic<MpscNode*> head_{&stub_};
  alignas(kCacheLine) MpscNode* tail_ = &stub_;
  MpscNode stub_;
};

}  // namespace eagercomm
