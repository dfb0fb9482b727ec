#include <cstring>
#include <string>

#include "runtime/gpu.h"
#include "transport/transport_log.h"
#include "transport/ucx/ucx_transport_impl.h"
#include "transport/ucx/ucx_wire.h"

namespace eagercomm::ucx {

Result<std::unique_ptr<MemoryRegion>> UcxTransport::make_region(ucp_mem_h memh, void* data,
                                                                size_t bytes, MemoryKind kind) {
  // The region owns memh from here on: an error below unmaps it.
  auto region = std::make_unique<UcxRegion>(core_, memh, data, bytes, kind);
  void* packed = nullptr;
  size_t packed_bytes = 0;
  const ucs_status_t s = ucp_rkey_pack(core_->context, memh, &packed, &packed_bytes);
  if (s != UCS_OK) return ucx_failure(s, "packing the remote key of a region");
  UcxKeyHeader h{};
  h.kind = static_cast<uint8_t>(kind);
  h.owner = rank();
  h.instance = instance_;
  h.base = reinterpret_cast<uint64_t>(data);
  h.size = bytes;
  std::vector<uint8_t> key =
      ucx_encode_key(h, std::span(static_cast<const uint8_t*>(packed), packed_bytes));
  ucp_rkey_buffer_release(packed);
  region->set_remote_key(std::move(key));
  return std::unique_ptr<MemoryRegion>(std::move(region));
}

Result<std::unique_ptr<MemoryRegion>> UcxTransport::allocate(size_t bytes, MemoryKind kind) {
  EC_ASSIGN_OR_RETURN(const ucs_memory_type_t type, memory_type_of(kind, core_->cuda_memory));
  if (bytes == 0) {
    return make_status(StatusCode::kInvalidArgument, "ucx: allocate: 0 bytes requested");
  }
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS |
                  UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
  mp.length = bytes;
  mp.flags = UCP_MEM_MAP_ALLOCATE;
  mp.memory_type = type;
  ucp_mem_h memh = nullptr;
  ucs_status_t s = ucp_mem_map(core_->context, &mp, &memh);
  if (s != UCS_OK) {
    return ucx_failure(s, "allocating " + std::to_string(bytes) + " bytes of mapped memory");
  }
  ucp_mem_attr_t ma{};
  ma.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
  s = ucp_mem_query(memh, &ma);
  if (s != UCS_OK || ma.address == nullptr || ma.length < bytes) {
    (void)ucp_mem_unmap(core_->context, memh);
    return ucx_failure(s != UCS_OK ? s : UCS_ERR_NO_MEMORY, "querying allocated memory");
  }
  // UCX may take it from a heap or a recycled segment; the contract says zero-filled.
  if (kind == MemoryKind::kCuda) {
    if (const Status z = gpu::zero(ma.address, bytes); !z.ok()) {
      (void)ucp_mem_unmap(core_->context, memh);
      return z;
    }
  } else {
    std::memset(ma.address, 0, bytes);
  }
  return make_region(memh, ma.address, bytes, kind);
}

Result<std::unique_ptr<MemoryRegion>> UcxTransport::register_memory(void* data, size_t bytes,
                                                                    MemoryKind kind) {
  EC_ASSIGN_OR_RETURN(const ucs_memory_type_t type, memory_type_of(kind, core_->cuda_memory));
  if (data == nullptr || bytes == 0) {
    return make_status(StatusCode::kInvalidArgument,
                       "ucx: register_memory: %s (pointer %p, %zu bytes)",
                       data == nullptr ? "null pointer" : "empty range", data, bytes);
  }
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                  UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
  mp.address = data;
  mp.length = bytes;
  mp.memory_type = type;
  ucp_mem_h memh = nullptr;
  const ucs_status_t s = ucp_mem_map(core_->context, &mp, &memh);
  if (s != UCS_OK) return ucx_failure(s, "registering " + std::to_string(bytes) + " bytes");
  return make_region(memh, data, bytes, kind);
}

Result<std::unique_ptr<RemoteRegion>> UcxTransport::import_region(int peer,
                                                                  std::span<const uint8_t> key) {
  EC_RETURN_IF_ERROR(check_peer(peer, "import_region"));
  EC_RETURN_IF_ERROR(open_ep(peer));
  const Peer& p = peers_[peer];
  EC_ASSIGN_OR_RETURN(const UcxKey decoded, ucx_decode_key(key, peer, p.instance));
  const UcxKeyHeader& h = decoded.header;
  EC_RETURN_IF_ERROR(memory_type_of(static_cast<MemoryKind>(h.kind), core_->cuda_memory).status());
  ucp_rkey_h rkey = nullptr;
  const ucs_status_t s = ucp_ep_rkey_unpack(p.ep, decoded.packed_rkey.data(), &rkey);
  if (s != UCS_OK) {
    return ucx_failure(s, "unpacking the remote key from rank " + std::to_string(peer));
  }
  // GPU memory is never handed out as a mapped pointer: host stores cannot reach it.
  void* mapped = nullptr;
  if (h.kind != static_cast<uint8_t>(MemoryKind::kHost) ||
      ucp_rkey_ptr(rkey, h.base, &mapped) != UCS_OK) {
    mapped = nullptr;
  }
  EC_DEBUG(kNet, "ucx: imported %zu bytes of rank %d (%s)", static_cast<size_t>(h.size), peer,
           mapped ? "mapped here" : "reached by puts");
  return std::unique_ptr<RemoteRegion>(
      std::make_unique<UcxRemote>(core_, peer, h.size, rkey, h.base, mapped));
}

void* UcxTransport::mapped_address(const RemoteRegion& remote) {
  const auto* r = exactly<UcxRemote>(remote);
  if (r == nullptr || r->core() != core_.get()) return nullptr;
  return r->mapped();
}

}  // namespace eagercomm::ucx
