#include "collectives/engine/failure_state.h"

#include "collectives/engine/control.h"

namespace eagercomm::detail {

bool GonePeers::mark(int peer, int64_t from, const Status& why) {
  if (from_[peer] >= 0 && from_[peer] <= from) return false;
  from_[peer] = from;
  why_[peer] = why;
  return true;
}

Status GonePeers::status_for(uint64_t seq) const {
  for (size_t peer = 0; peer < from_.size(); ++peer) {
    if (from_[peer] >= 0 && seq >= static_cast<uint64_t>(from_[peer])) {
      return make_status(why_[peer].code(), "%s (collective %s cannot finish)",
                         why_[peer].message().c_str(), seq_text(seq).c_str());
    }
  }
  return Status::Ok();
}

}  // namespace eagercomm::detail
