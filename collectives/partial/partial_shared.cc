#include "collectives/partial/partial_shared.h"

#include "collectives/engine/comm_core.h"

namespace eagercomm::detail {

int PartialShared::initiator(uint64_t round) const {
  // splitmix64 of (seed, round): identical on every rank, uniform over the ranks.
  uint64_t z = options.seed + 0x9e3779b97f4a7c15ull * (round + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<int>(z % static_cast<uint64_t>(size));
}

void PartialShared::recycle(uint32_t buffer) {
  ContributionBuffer& buf = *buffers[buffer];
  buf.reset_meta();
  // The queue has room for every buffer, so this never fails.
  (void)free_buffers.try_push(buffer);
  core->engine().kick();  // a rank held back by a full result queue may go on
}

}  // namespace eagercomm::detail
