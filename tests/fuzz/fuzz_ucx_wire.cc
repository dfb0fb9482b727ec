// libFuzzer target: our framing of the ucx transport's address and remote key (ucx_wire.h).
// What is inside the frame, the UCX worker address and packed rkey, is parsed by UCX itself
// (ucp_ep_create, ucp_ep_rkey_unpack) and cannot be fuzzed without a UCX context; the frame's
// lengths and checksum are what keep a corrupt blob from reaching those calls. The first byte
// picks the peer; keys must be of instance 0x1234. Any input must decode or fail with a Status; a
// blob that decodes must be the peer's, its parts must lie inside it, and it must re-encode to
// the same bytes but for the reserved ones.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "transport/notify_ring/notify_ring.h"
#include "transport/ucx/ucx_wire.h"

using namespace eagercomm;

namespace {

bool inside(std::span<const uint8_t> part, std::span<const uint8_t> whole) {
  return part.data() >= whole.data() && part.size() <= whole.size() &&
         part.data() - whole.data() <= static_cast<ptrdiff_t>(whole.size() - part.size());
}

// `again` equals `blob` but at the reserved byte offsets in [from, to).
bool same_but(const std::vector<uint8_t>& again, std::span<const uint8_t> blob, size_t from,
              size_t to) {
  if (again.size() != blob.size()) return false;
  for (size_t i = 0; i < blob.size(); ++i) {
    if ((i < from || i >= to) && again[i] != blob[i]) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int peer = data[0] % 8;
  const std::span<const uint8_t> blob(data + 1, size - 1);
  if (auto a = ucx_decode_address(blob, peer); a.ok()) {
    const UcxAddress& d = a.value();
    if (d.header.rank != peer || !inside(d.worker_address, blob) || !inside(d.notify_key, blob) ||
        !notify_ring::valid_capacity(d.header.ring_capacity)) {
      std::abort();
    }
    if (!same_but(ucx_encode_address(d.header, d.worker_address, d.notify_key), blob, 6, 8)) {
      std::abort();
    }
  }
  constexpr uint64_t kInstance = 0x1234;
  if (auto k = ucx_decode_key(blob, peer, kInstance); k.ok()) {
    const UcxKey& d = k.value();
    if (d.header.owner != peer || d.header.instance != kInstance || d.header.size == 0 ||
        d.header.base + d.header.size < d.header.base || d.header.kind > 1 ||
        !inside(d.packed_rkey, blob)) {
      std::abort();
    }
    if (!same_but(ucx_encode_key(d.header, d.packed_rkey), blob, 7, 8)) std::abort();
  }
  return 0;
}
