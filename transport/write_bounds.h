// The bounds check every backend's write() runs before it touches either region: one copy, so
// that the four backends refuse the same writes with the same words.
#pragma once

#include <cstddef>

#include "runtime/status.h"
#include "transport/transport.h"

namespace eagercomm {

// Ok when [local_offset, +bytes) lies inside `local` and [remote_offset, +bytes) inside
// `remote`, written so that no sum can overflow; otherwise kInvalidArgument naming the backend
// and both ranges. `max_bytes` is the most one write may carry (verbs: a 32-bit length).
inline Status check_write_bounds(const char* backend, const MemoryRegion& local,
                                 size_t local_offset, const RemoteRegion& remote,
                                 size_t remote_offset, size_t bytes,
                                 size_t max_bytes = static_cast<size_t>(-1)) {
  if (local_offset > local.size() || bytes > local.size() - local_offset ||
      remote_offset > remote.size() || bytes > remote.size() - remote_offset || bytes > max_bytes) {
    return make_status(StatusCode::kInvalidArgument,
                       "%s: write of %zu bytes out of bounds (local %zu+%zu of %zu, remote "
                       "%zu+%zu of %zu)",
                       backend, bytes, local_offset, bytes, local.size(), remote_offset, bytes,
                       remote.size());
  }
  return Status::Ok();
}

}  // namespace eagercomm
