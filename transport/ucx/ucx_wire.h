// The `ucx` transport's blobs (ucx/ucx_transport.h) as pure functions, built without UCX so that
// they can be fuzzed and unit-tested anywhere: a rank's address and a region's remote key, as
// peers publish them through the store.
//
// Both are our framing around bytes that only UCX can read: a header, then the UCX worker
// address (ucp_worker_get_address) followed by the notification region's remote key, or the
// packed rkey (ucp_rkey_pack). UCX parses those itself, in ucp_ep_create() and
// ucp_ep_rkey_unpack(), and trusts them: the rkey has no length field at all. The framing is
// what protects those calls, so it carries the lengths and an FNV-1a checksum of everything
// after the header, and a blob that disagrees with either never reaches UCX.
//
// Layout: host byte order (the header carries the sender's host identity, and peers on other
// hosts of another byte order are not supported).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/status.h"

namespace eagercomm {

inline constexpr uint32_t kUcxAddressMagic = 0x41584345;  // "ECXA"
inline constexpr uint32_t kUcxKeyMagic = 0x4b584345;      // "ECXK"
inline constexpr uint16_t kUcxFormatVersion = 2;

struct UcxAddressHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved;
  int32_t rank;
  uint32_t worker_bytes;
  uint64_t instance;  // random per transport: keys must come from the instance we connected to
  uint64_t host;      // host_identity_hash(): peers on other hosts never share memory with us
  uint32_t notify_key_bytes;  // the notification region's key follows the worker address
  uint32_t ring_capacity;     // entries of each ring in it
  uint64_t checksum;          // of the worker address and the key (ucp_ep_create trusts its input)
};
static_assert(sizeof(UcxAddressHeader) == 48);

struct UcxKeyHeader {
  uint32_t magic;
  uint16_t version;
  uint8_t kind;  // MemoryKind
  uint8_t reserved;
  int32_t owner;
  uint32_t rkey_bytes;
  uint64_t instance;
  uint64_t base;
  uint64_t size;
  uint64_t checksum;  // of the packed rkey, which ucp_ep_rkey_unpack parses without a length
};
static_assert(sizeof(UcxKeyHeader) == 48);

// An address: `header`'s rank, instance, host and ring_capacity as given; the rest is filled in.
std::vector<uint8_t> ucx_encode_address(UcxAddressHeader header,
                                        std::span<const uint8_t> worker_address,
                                        std::span<const uint8_t> notify_key);

struct UcxAddress {
  UcxAddressHeader header;
  std::span<const uint8_t> worker_address;  // into the decoded blob
  std::span<const uint8_t> notify_key;      // likewise
};
// Checks the header's magic and version, that the address is `peer`'s, the lengths, the
// checksum and the ring capacity. kProtocolError when any is wrong.
Result<UcxAddress> ucx_decode_address(std::span<const uint8_t> blob, int peer);

// A remote key: `header`'s kind, owner, instance, base and size as given; the rest filled in.
std::vector<uint8_t> ucx_encode_key(UcxKeyHeader header, std::span<const uint8_t> packed_rkey);

struct UcxKey {
  UcxKeyHeader header;
  std::span<const uint8_t> packed_rkey;  // into the decoded blob
};
// Checks the header's magic and version, that the key is `peer`'s and of the transport instance
// this rank connected to (`instance`), the length, the checksum, the range (nonempty, no
// wrap-around) and the memory kind. kProtocolError when any is wrong. Whether this UCX build
// can reach memory of that kind is the transport's question.
Result<UcxKey> ucx_decode_key(std::span<const uint8_t> blob, int peer, uint64_t instance);

}  // namespace eagercomm
