#include "transport/inproc/inproc_key.h"

#include <cstdio>
#include <cstring>

namespace eagercomm {
namespace {

constexpr uint32_t kKeyMagic = 0x50494345;  // "ECIP"
constexpr uint8_t kKeyVersion = 2;          // 2: with the memory kind

struct PackedKey {
  uint32_t magic;
  int32_t owner;
  uint64_t fabric_id;
  uint64_t block_id;
  uint64_t size;
  uint8_t version;
  uint8_t kind;  // MemoryKind
  uint8_t reserved[6];
};
static_assert(sizeof(PackedKey) == kInprocKeyBytes);

}  // namespace

std::vector<uint8_t> InprocKey::pack() const {
  PackedKey key{};
  key.magic = kKeyMagic;
  key.owner = owner;
  key.fabric_id = fabric_id;
  key.block_id = block_id;
  key.size = size;
  key.version = kKeyVersion;
  key.kind = kind;
  std::vector<uint8_t> out(sizeof(key));
  std::memcpy(out.data(), &key, sizeof(key));
  return out;
}

Result<InprocKey> InprocKey::unpack(std::span<const uint8_t> blob, int peer, uint64_t fabric_id) {
  PackedKey k;
  if (blob.size() != sizeof(k)) {
    return make_status(StatusCode::kProtocolError,
                       "inproc: remote key from rank %d has %zu bytes, expected %zu", peer,
                       blob.size(), sizeof(k));
  }
  std::memcpy(&k, blob.data(), sizeof(k));
  if (k.magic != kKeyMagic || k.fabric_id != fabric_id || k.owner != peer) {
    return make_status(StatusCode::kProtocolError,
                       "inproc: remote key from rank %d is not an inproc key of this fabric", peer);
  }
  if (k.version != kKeyVersion) {
    return make_status(StatusCode::kProtocolError,
                       "inproc: remote key from rank %d has version %u, this build reads %u", peer,
                       k.version, kKeyVersion);
  }
  return InprocKey{k.owner, k.fabric_id, k.block_id, k.size, k.kind};
}

std::vector<uint8_t> inproc_address(int32_t rank) {
  std::vector<uint8_t> a(sizeof(rank));
  std::memcpy(a.data(), &rank, sizeof(rank));
  return a;
}

Status inproc_check_address(std::span<const uint8_t> address, int peer) {
  int32_t r = -1;
  if (address.size() == sizeof(r)) std::memcpy(&r, address.data(), sizeof(r));
  if (r != peer) {
    return make_status(StatusCode::kProtocolError, "inproc: bad address blob for rank %d", peer);
  }
  return Status::Ok();
}

std::string inproc_fabric_record(const InprocFabricRecord& record) {
  return std::to_string(record.pid) + ":" + std::to_string(record.fabric_id);
}

Result<InprocFabricRecord> inproc_parse_fabric_record(const std::string& value) {
  InprocFabricRecord r;
  // c_str(): sscanf stops at the first NUL, as it did on the store value before.
  if (sscanf(value.c_str(), "%ld:%llu", &r.pid, &r.fabric_id) != 2) {
    return make_status(StatusCode::kProtocolError, "inproc: bad fabric record '%s'", value.c_str());
  }
  return r;
}

}  // namespace eagercomm
