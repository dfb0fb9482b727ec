// The peers a rank has exchanged traffic with, for backends whose connections cost nothing to
// make (inproc, sim): Transport::connected_peers() there counts what a backend with a connection
// per pair (verbs' RC queue pairs) would hold, the first message of either side making the pair.
// Driver-only, like the transports that keep it.
#pragma once

#include <cstdint>
#include <vector>

namespace eagercomm {

class PeerContacts {
 public:
  explicit PeerContacts(int size) : seen_(static_cast<size_t>(size), 0) {}
  void mark(int peer) {
    if (peer < 0 || static_cast<size_t>(peer) >= seen_.size() || seen_[peer]) return;
    seen_[peer] = 1;
    ++count_;
  }
  uint32_t count() const { return count_; }

 private:
  std::vector<uint8_t> seen_;
  uint32_t count_ = 0;
};

}  // namespace eagercomm
