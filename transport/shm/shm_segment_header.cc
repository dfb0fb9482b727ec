#include "transport/shm/shm_segment_header.h"

#include <cstring>

namespace eagercomm {
namespace {

constexpr uint64_t kHeaderMagic = 0x314d48534d4f4345ull;  // "ECOMSHM1"
constexpr uint32_t kHeaderVersion = 1;

struct SegmentHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t kind;
  int32_t owner;
  uint32_t reserved;
  uint64_t bytes;
  uint64_t check;
};
static_assert(sizeof(SegmentHeader) == kShmSegmentHeaderBytes);
static_assert(kShmSegmentHeaderBytes <= kShmHeaderBytes);

}  // namespace

std::array<uint8_t, kShmSegmentHeaderBytes> shm_segment_header(const ShmKey& key) {
  const SegmentHeader h{kHeaderMagic, kHeaderVersion, static_cast<uint32_t>(key.kind), key.owner, 0,
                        key.bytes,    key.check};
  std::array<uint8_t, kShmSegmentHeaderBytes> out;
  std::memcpy(out.data(), &h, sizeof(h));
  return out;
}

Status shm_check_segment_header(std::span<const uint8_t> header, const ShmKey& key,
                                const char* what) {
  SegmentHeader h;
  if (header.size() < sizeof(h)) {
    return make_status(StatusCode::kProtocolError,
                       "shm: segment %s has a %zu-byte header, less than %zu (%s)",
                       key.name.c_str(), header.size(), sizeof(h), what);
  }
  std::memcpy(&h, header.data(), sizeof(h));
  if (h.magic != kHeaderMagic || h.version != kHeaderVersion ||
      h.kind != static_cast<uint32_t>(key.kind) || h.owner != key.owner || h.bytes != key.bytes ||
      h.check != key.check) {
    return make_status(StatusCode::kProtocolError,
                       "shm: segment %s does not match %s (owner, size, kind or check value "
                       "differ: a stale segment of an earlier run, or a bad key)",
                       key.name.c_str(), what);
  }
  return Status::Ok();
}

}  // namespace eagercomm
