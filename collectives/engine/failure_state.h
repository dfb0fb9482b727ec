// Internal: what a communicator remembers about failures. Not installed.
//
// GonePeers: the peers that left, were lost or were declared hung, from which collective on,
// and why. DrainingOps: failed operations whose buffers peers may still be using (direct
// allreduce lends them); they complete only when those peers confirm they stopped (or leave),
// because the caller may free its buffers the moment the request completes.
//
// Thread-safety: the current engine driver only.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "collectives/engine/op.h"
#include "runtime/status.h"

namespace eagercomm::detail {

class GonePeers {
 public:
  explicit GonePeers(int size) : from_(size, -1), why_(size) {}

  bool gone(int peer) const { return from_[peer] >= 0; }
  int size() const { return static_cast<int>(from_.size()); }
  // Records that `peer` takes part in no collective from sequence `from` on (0: none at all),
  // because of `why`. False when it was gone from that sequence or earlier already.
  bool mark(int peer, int64_t from, const Status& why);
  // The error of collective `seq` when a peer it needs is gone (Ok otherwise).
  Status status_for(uint64_t seq) const;

 private:
  std::vector<int64_t> from_;  // per peer: first sequence it will never run (-1: not gone)
  std::vector<Status> why_;    // per peer: why it is gone (when from_ >= 0)
};

class DrainingOps {
 public:
  // `op` failed with `status`; `pending` peers may still be using its buffers.
  void add(Op* op, const Status& status, std::vector<int> pending) {
    ops_[op->key()] = Entry{op, status, std::move(pending)};
  }
  bool contains(OpKey key) const { return ops_.count(key) != 0; }
  bool empty() const { return ops_.empty(); }
  size_t size() const { return ops_.size(); }
  // `peer` no longer uses the buffers of the operation `key` (of all, when empty); `done(op,
  // status)` is called for every operation no peer uses any more, after it left this set.
  template <typename Done>
  void release(int peer, std::optional<OpKey> key, Done&& done) {
    for (auto it = ops_.begin(); it != ops_.end();) {
      if (!key || it->first == *key) std::erase(it->second.pending, peer);
      if (!it->second.pending.empty()) {
        ++it;
        continue;
      }
      Op* op = it->second.op;
      const Status status = it->second.status;
      it = ops_.erase(it);
      done(op, status);
    }
  }
  // The peers still waited for, in rank order without repeats ("3, 5").
  std::string pending_ranks() const {
    std::set<int> ranks;
    for (const auto& [key, e] : ops_) ranks.insert(e.pending.begin(), e.pending.end());
    std::string text;
    for (int r : ranks) text += (text.empty() ? "" : ", ") + std::to_string(r);
    return text;
  }
  // Gives up waiting: `done(op, status)` for every operation still here, which leave the set.
  template <typename Done>
  void abandon_all(Done&& done) {
    std::map<OpKey, Entry> left = std::move(ops_);
    ops_.clear();
    for (auto& [key, e] : left) done(e.op, e.status);
  }

 private:
  struct Entry {
    Op* op;
    Status status;
    std::vector<int> pending;
  };
  std::map<OpKey, Entry> ops_;
};

}  // namespace eagercomm::detail
