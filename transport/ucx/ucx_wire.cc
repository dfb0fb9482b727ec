#include "transport/ucx/ucx_wire.h"

#include <cstring>
#include <string>

#include "runtime/hash.h"
#include "runtime/memory.h"
#include "transport/notify_ring/notify_ring.h"

namespace eagercomm {
namespace {

// Copies the fixed header at the start of a blob a peer sent (an address or a remote key) and
// checks its magic and format version. `what` names the blob in errors ("address of rank 3"),
// `kind` the expected kind ("address"), `hint` is appended to the format error.
template <class Header>
Result<Header> read_blob_header(std::span<const uint8_t> blob, uint32_t magic,
                                const std::string& what, const char* kind, const char* hint) {
  Header h;
  if (blob.size() < sizeof(h)) {
    return make_status(StatusCode::kProtocolError,
                       "ucx: %s has %zu bytes, less than its %zu-byte header", what.c_str(),
                       blob.size(), sizeof(h));
  }
  std::memcpy(&h, blob.data(), sizeof(h));
  if (h.magic != magic || h.version != kUcxFormatVersion) {
    return make_status(StatusCode::kProtocolError,
                       "ucx: %s is not a ucx %s of format %u (magic 0x%08x, version %u)%s",
                       what.c_str(), kind, kUcxFormatVersion, h.magic, h.version, hint);
  }
  return h;
}

}  // namespace

std::vector<uint8_t> ucx_encode_address(UcxAddressHeader header,
                                        std::span<const uint8_t> worker_address,
                                        std::span<const uint8_t> notify_key) {
  std::vector<uint8_t> out(sizeof(header) + worker_address.size() + notify_key.size());
  uint8_t* body = out.data() + sizeof(header);
  if (!worker_address.empty()) std::memcpy(body, worker_address.data(), worker_address.size());
  if (!notify_key.empty()) {
    std::memcpy(body + worker_address.size(), notify_key.data(), notify_key.size());
  }
  header.magic = kUcxAddressMagic;
  header.version = kUcxFormatVersion;
  header.reserved = 0;
  header.worker_bytes = static_cast<uint32_t>(worker_address.size());
  header.notify_key_bytes = static_cast<uint32_t>(notify_key.size());
  header.checksum = fnv1a(body, out.size() - sizeof(header));
  std::memcpy(out.data(), &header, sizeof(header));
  return out;
}

Result<UcxAddress> ucx_decode_address(std::span<const uint8_t> blob, int peer) {
  EC_ASSIGN_OR_RETURN(const UcxAddressHeader h,
                      read_blob_header<UcxAddressHeader>(
                          blob, kUcxAddressMagic, "address of rank " + std::to_string(peer),
                          "address", "; do all ranks use the ucx transport?"));
  if (h.rank != peer) {
    return make_status(StatusCode::kProtocolError,
                       "ucx: the address of rank %d was given as rank %d's", h.rank, peer);
  }
  const std::span<const uint8_t> body = blob.subspan(sizeof(h));
  if (uint64_t{h.worker_bytes} + h.notify_key_bytes != body.size() ||
      h.checksum != fnv1a(body.data(), body.size()) ||
      !notify_ring::valid_capacity(h.ring_capacity)) {
    return make_status(StatusCode::kProtocolError,
                       "ucx: address of rank %d is truncated or corrupt (%zu bytes after the "
                       "header, which says %u + %u; ring capacity %u)",
                       peer, body.size(), h.worker_bytes, h.notify_key_bytes, h.ring_capacity);
  }
  return UcxAddress{h, body.first(h.worker_bytes), body.subspan(h.worker_bytes)};
}

std::vector<uint8_t> ucx_encode_key(UcxKeyHeader header, std::span<const uint8_t> packed_rkey) {
  std::vector<uint8_t> out(sizeof(header) + packed_rkey.size());
  if (!packed_rkey.empty()) {
    std::memcpy(out.data() + sizeof(header), packed_rkey.data(), packed_rkey.size());
  }
  header.magic = kUcxKeyMagic;
  header.version = kUcxFormatVersion;
  header.reserved = 0;
  header.rkey_bytes = static_cast<uint32_t>(packed_rkey.size());
  header.checksum = fnv1a(packed_rkey.data(), packed_rkey.size());
  std::memcpy(out.data(), &header, sizeof(header));
  return out;
}

Result<UcxKey> ucx_decode_key(std::span<const uint8_t> blob, int peer, uint64_t instance) {
  EC_ASSIGN_OR_RETURN(
      const UcxKeyHeader h,
      read_blob_header<UcxKeyHeader>(blob, kUcxKeyMagic,
                                     "remote key from rank " + std::to_string(peer), "key", ""));
  if (h.owner != peer) {
    return make_status(StatusCode::kProtocolError,
                       "ucx: remote key of rank %d's memory was given as rank %d's", h.owner, peer);
  }
  if (h.instance != instance) {
    return make_status(StatusCode::kProtocolError,
                       "ucx: remote key from rank %d was made by another transport instance than "
                       "the one this rank connected to (a stale key?)",
                       peer);
  }
  const std::span<const uint8_t> rkey = blob.subspan(sizeof(h));
  if (h.rkey_bytes != rkey.size() || h.checksum != fnv1a(rkey.data(), rkey.size())) {
    return make_status(StatusCode::kProtocolError,
                       "ucx: remote key from rank %d is truncated or corrupt (%zu rkey bytes, "
                       "header says %u)",
                       peer, rkey.size(), h.rkey_bytes);
  }
  if (h.size == 0 || h.base + h.size < h.base) {
    return make_status(StatusCode::kProtocolError,
                       "ucx: remote key from rank %d describes an invalid range (%zu bytes at "
                       "0x%llx)",
                       peer, static_cast<size_t>(h.size), static_cast<unsigned long long>(h.base));
  }
  if (h.kind > static_cast<uint8_t>(MemoryKind::kCuda)) {
    return make_status(StatusCode::kProtocolError,
                       "ucx: remote key from rank %d has unknown memory kind %u", peer, h.kind);
  }
  return UcxKey{h, rkey};
}

}  // namespace eagercomm
