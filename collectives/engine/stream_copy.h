// Copies with non-temporal (streaming) stores, for results that the caller will not read again
// soon: the destination lines are not read first (no read-for-ownership) and do not evict the
// working set, which cuts the memory traffic of a large store by a third.
//
// Streaming stores are weakly ordered: call stream_fence() after the last stream_copy() and
// before publishing the data to another thread (a release store or a notification).
#pragma once

#include <cstddef>

namespace eagercomm {

void stream_copy(void* dst, const void* src, size_t bytes);
void stream_fence();

}  // namespace eagercomm
