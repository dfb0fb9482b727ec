#include "collectives/partial/partial_shared.h"

#include <cstring>

#include "collectives/engine/comm_core.h"
#include "collectives/partial/partial_meta.h"

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

Result<std::shared_ptr<PartialShared>> PartialShared::make(std::shared_ptr<CommCore> core,
                                                           uint32_t stream, size_t count,
                                                           DataType type, PartialMode mode,
                                                           const PartialOptions& options) {
  const size_t buffers = options.result_depth + 1;
  auto shared = std::make_shared<PartialShared>(buffers, 4096);
  shared->stream = stream;
  shared->rank = core->rank();
  shared->size = core->size();
  shared->count = count;
  shared->type = type;
  shared->bytes = count * dtype_size(type);
  shared->mode = mode;
  shared->tail_bytes = meta_elements(type, shared->size, shared->meta_compute()) * dtype_size(type);
  shared->options = options;
  shared->core = core;
  const bool backups = options.on_failure == OnFailure::kContinue;
  for (size_t b = 0; b < buffers; ++b) {
    auto buf = std::make_unique<ContributionBuffer>();
    EC_ASSIGN_OR_RETURN(buf->region, core->allocate(shared->bytes + shared->tail_bytes));
    // Fault the pages in now rather than in the first rounds (a first touch costs a page fault
    // per 4 KiB, several milliseconds per MiB on a VM, and every buffer is used in turn).
    std::memset(buf->region->data(), 0, shared->bytes + shared->tail_bytes);
    if (backups) buf->backup.assign(shared->bytes, 0);
    shared->buffers.push_back(std::move(buf));
    if (b > 0) (void)shared->free_buffers.try_push(static_cast<uint32_t>(b));
  }
  shared->open.store(pack(0, 0));
  return shared;
}

}  // namespace eagercomm::detail
