// libFuzzer target: the blobs the shm transport decodes (shm_segment.h, cuda_ipc_key.h,
// shm_segment_header.h). The input is a remote key or address as a peer publishes it through the
// store, dispatched the way import_region() does: a blob that claims the CUDA IPC key's magic goes
// to CudaIpcKey::unpack, any other to ShmKey::unpack. Any input must decode or fail with a
// Status; a key that decodes must re-encode to the same bytes (the decoder accepted nothing it
// did not represent) and satisfy the bounds the transport relies on. The input is also checked as
// the header of a mapped segment against a fixed key, and a decoded shm key's own header must
// pass its check.
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "transport/cuda_ipc/cuda_ipc_key.h"
#include "transport/shm/shm_segment.h"
#include "transport/shm/shm_segment_header.h"

using namespace eagercomm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> blob(data, size);
  if (CudaIpcKey::claims(blob)) {
    if (auto k = CudaIpcKey::unpack(blob, "fuzz key"); k.ok()) {
      const CudaIpcKey& key = k.value();
      if (key.owner < 0 || key.bytes > kCudaIpcMaxBytes || key.offset > kCudaIpcMaxBytes ||
          key.address + key.bytes < key.address) {
        std::abort();
      }
      if (key.pack() != std::vector<uint8_t>(blob.begin(), blob.end())) std::abort();
    }
  } else if (auto k = ShmKey::unpack(blob, "fuzz key"); k.ok()) {
    const ShmKey& key = k.value();
    if (key.bytes > kShmMaxPayloadBytes || key.name.size() < 2 || key.name.size() > NAME_MAX + 1 ||
        key.name[0] != '/') {
      std::abort();
    }
    if (key.pack() != std::vector<uint8_t>(blob.begin(), blob.end())) std::abort();
    const auto header = shm_segment_header(key);
    if (!shm_check_segment_header(header, key, "fuzz key").ok()) std::abort();
  }
  static const ShmKey fixed{"/eagercomm-fuzz-0-1", 4096, 1, ShmSegmentKind::kData, 42};
  if (shm_check_segment_header(blob, fixed, "fuzz key").ok()) {
    // Accepted: the bytes that matter must be the fixed key's header (the reserved word aside).
    const auto want = shm_segment_header(fixed);
    for (size_t i = 0; i < want.size(); ++i) {
      if ((i < 20 || i >= 24) && blob[i] != want[i]) std::abort();
    }
  }
  return 0;
}
