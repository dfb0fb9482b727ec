// libFuzzer target: the blobs the inproc transport decodes (inproc_key.h): a remote key, an
// address and the fabric record from the store. The first byte picks the peer the blobs are
// said to come from; the key must be of fabric 42. Any input must decode or fail with a Status;
// a key that decodes must be the peer's, and re-encode to the same bytes but for the reserved
// ones (the decoder ignores those; the kind is the transport's to check against the block).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "transport/inproc/inproc_key.h"

using namespace eagercomm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int peer = data[0] % 8;
  const std::span<const uint8_t> blob(data + 1, size - 1);
  constexpr uint64_t kFabric = 42;
  if (auto k = InprocKey::unpack(blob, peer, kFabric); k.ok()) {
    if (k.value().owner != peer || k.value().fabric_id != kFabric) std::abort();
    const std::vector<uint8_t> again = k.value().pack();
    if (again.size() != blob.size() || std::memcmp(again.data(), blob.data(), 34) != 0) {
      std::abort();
    }
  }
  if (inproc_check_address(blob, peer).ok() &&
      inproc_address(peer) != std::vector<uint8_t>(blob.begin(), blob.end())) {
    std::abort();
  }
  const std::string text(blob.begin(), blob.end());
  if (auto r = inproc_parse_fabric_record(text); r.ok()) {
    auto again = inproc_parse_fabric_record(inproc_fabric_record(r.value()));
    if (!again.ok() || again.value().pid != r.value().pid ||
        again.value().fabric_id != r.value().fabric_id) {
      std::abort();
    }
  }
  return 0;
}
