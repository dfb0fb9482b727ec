#include "transport/cuda_ipc/cuda_ipc_region.h"

#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "transport/transport_log.h"

namespace eagercomm {
namespace {

// A peer's allocation opened with cudaIpcOpenMemHandle, and its size as the driver reports it
// here (the bound for every region a key places in it: keys are the peer's word, this is not).
struct OpenedAllocation {
  gpu::IpcMapping mapping;
  size_t bytes = 0;
};

// One opening per allocation and process: opening a handle that is already open in this context
// is an error in CUDA, and two transports (communicators) may import regions of one allocation.
struct OpenedAllocations {
  std::mutex mu;
  std::map<gpu::IpcHandle, std::weak_ptr<OpenedAllocation>> by_handle;
};
OpenedAllocations& opened_allocations() {
  // Never destroyed: imports destroyed during static destruction still find it.
  static auto* table = new OpenedAllocations;
  return *table;
}

Result<std::shared_ptr<OpenedAllocation>> open_allocation(const gpu::IpcHandle& handle,
                                                          const char* what) {
  OpenedAllocations& table = opened_allocations();
  std::lock_guard<std::mutex> lock(table.mu);
  std::erase_if(table.by_handle, [](const auto& entry) { return entry.second.expired(); });
  if (auto it = table.by_handle.find(handle); it != table.by_handle.end()) {
    if (auto opened = it->second.lock()) return opened;
  }
  Result<gpu::IpcMapping> mapping = gpu::IpcMapping::open(handle);
  if (!mapping.ok()) {
    Status s = mapping.status();
    s.prepend(std::string("shm: ") + what + ": ");
    return s;
  }
  Result<gpu::AddressRange> range = gpu::address_range(mapping.value().base());
  if (!range.ok()) {
    Status s = range.status();
    s.prepend(std::string("shm: ") + what + ": the opened allocation: ");
    return s;
  }
  auto opened = std::make_shared<OpenedAllocation>(
      OpenedAllocation{std::move(mapping).value(), range.value().bytes});
  table.by_handle[handle] = opened;
  EC_DEBUG(kNet, "shm: opened a peer's %zu-byte GPU allocation (CUDA IPC) at %p", opened->bytes,
           opened->mapping.base());
  return opened;
}

}  // namespace

Status cuda_memory_available(const char* transport) {
  if (!gpu::cuda_built()) {
    return make_status(StatusCode::kNotSupported,
                       "%s: memory kind cuda needs a build with CUDA, and this one has none "
                       "(configure with the CUDA toolkit and EAGERCOMM_WITH_CUDA=ON)",
                       transport);
  }
  // GPUs do not come and go while a process runs; asking once keeps set-up paths cheap.
  static const gpu::Inventory inventory = gpu::query();
  if (inventory.devices.empty()) {
    return make_status(StatusCode::kUnavailable,
                       "%s: memory kind cuda needs a GPU, and this process has none: %s", transport,
                       inventory.reason.c_str());
  }
  return Status::Ok();
}

Result<gpu::DeviceBuffer> allocate_device_zeroed(size_t bytes) {
  EC_ASSIGN_OR_RETURN(gpu::DeviceBuffer buffer, gpu::DeviceBuffer::allocate(bytes));
  // Finished when zero() returns (a peer's first write must not be overwritten by it), without
  // waiting for the application's streams as cudaDeviceSynchronize would.
  EC_RETURN_IF_ERROR(gpu::zero(buffer.data(), bytes));
  return buffer;
}

Status check_device_range(const void* p, size_t bytes, const char* what) {
  EC_RETURN_IF_ERROR(gpu::check_buffer_kind(p, MemoryKind::kCuda, what));
  EC_ASSIGN_OR_RETURN(const gpu::AddressRange range, gpu::address_range(p));
  const auto begin = reinterpret_cast<uintptr_t>(p);
  if (begin < range.base || bytes > range.bytes - (begin - range.base)) {
    return make_status(StatusCode::kInvalidArgument,
                       "%s: %zu bytes at %p run past the end of their device allocation (%zu "
                       "bytes at 0x%llx)",
                       what, bytes, p, range.bytes, static_cast<unsigned long long>(range.base));
  }
  return Status::Ok();
}

WriteCopy write_copy_for(MemoryKind src, MemoryKind dst) {
  return src == MemoryKind::kHost && dst == MemoryKind::kHost ? WriteCopy::kMemcpy
                                                              : WriteCopy::kCudaMemcpy;
}

Status copy_for_write(void* dst, MemoryKind dst_kind, const void* src, MemoryKind src_kind,
                      size_t bytes) {
  if (bytes == 0) return Status::Ok();
  if (write_copy_for(src_kind, dst_kind) == WriteCopy::kMemcpy) {
    std::memcpy(dst, src, bytes);
    return Status::Ok();
  }
  // Waited for: the notification that follows must not overtake the bytes.
  return gpu::copy_and_wait(dst, src, bytes);
}

CudaImportPath cuda_import_path(const CudaIpcKey& key, uint64_t this_process) {
  return key.process == this_process ? CudaImportPath::kSameProcess : CudaImportPath::kIpc;
}

CudaIpcRegion::CudaIpcRegion(void* data, size_t bytes, std::optional<gpu::DeviceBuffer> owned,
                             std::vector<uint8_t> key)
    : MemoryRegion(data, bytes, MemoryKind::kCuda), owned_(std::move(owned)) {
  remote_key_ = std::move(key);
}

namespace {
// The key of a region of `bytes` at device address `data` (an empty region has no handle).
Result<std::vector<uint8_t>> region_key(void* data, size_t bytes, int owner) {
  CudaIpcKey key;
  key.owner = owner;
  key.bytes = bytes;
  key.process = cuda_ipc_process_token();
  key.address = reinterpret_cast<uintptr_t>(data);
  if (bytes > 0) {
    EC_ASSIGN_OR_RETURN(const gpu::IpcExport exported, gpu::ipc_export(data));
    key.handle = exported.handle;
    key.offset = exported.offset;
  }
  return key.pack();
}
}  // namespace

Result<std::unique_ptr<MemoryRegion>> CudaIpcRegion::allocate(size_t bytes, int owner) {
  if (bytes > kCudaIpcMaxBytes) {
    return make_status(StatusCode::kInvalidArgument,
                       "shm: allocate(%zu, cuda): a region may have at most %llu bytes", bytes,
                       static_cast<unsigned long long>(kCudaIpcMaxBytes));
  }
  std::optional<gpu::DeviceBuffer> owned;
  if (bytes > 0) {
    Result<gpu::DeviceBuffer> buffer = allocate_device_zeroed(bytes);
    if (!buffer.ok()) {
      Status s = buffer.status();
      s.prepend("shm: allocate(" + std::to_string(bytes) + ", cuda): ");
      return s;
    }
    owned.emplace(std::move(buffer).value());
  }
  void* data = owned ? owned->data() : nullptr;
  EC_ASSIGN_OR_RETURN(std::vector<uint8_t> key, region_key(data, bytes, owner));
  return std::unique_ptr<MemoryRegion>(
      new CudaIpcRegion(data, bytes, std::move(owned), std::move(key)));
}

Result<std::unique_ptr<MemoryRegion>> CudaIpcRegion::wrap(void* data, size_t bytes, int owner) {
  if (bytes > kCudaIpcMaxBytes) {
    return make_status(StatusCode::kInvalidArgument,
                       "shm: register_memory(%p, %zu, cuda): a region may have at most %llu bytes",
                       data, bytes, static_cast<unsigned long long>(kCudaIpcMaxBytes));
  }
  if (bytes > 0) EC_RETURN_IF_ERROR(check_device_range(data, bytes, "shm: register_memory"));
  EC_ASSIGN_OR_RETURN(std::vector<uint8_t> key, region_key(data, bytes, owner));
  return std::unique_ptr<MemoryRegion>(
      new CudaIpcRegion(data, bytes, std::nullopt, std::move(key)));
}

Result<std::unique_ptr<RemoteRegion>> CudaIpcRemote::import(int peer, const CudaIpcKey& key,
                                                            uint64_t transport_id,
                                                            const char* what) {
  EC_RETURN_IF_ERROR(cuda_memory_available("shm"));
  if (key.bytes == 0) {
    return std::unique_ptr<RemoteRegion>(
        new CudaIpcRemote(peer, 0, nullptr, nullptr, transport_id));
  }
  if (cuda_import_path(key, cuda_ipc_process_token()) == CudaImportPath::kSameProcess) {
    // The owner's pointer, checked like a registration: a key of this process names an
    // allocation that exists here.
    auto* p = reinterpret_cast<uint8_t*>(key.address);
    Result<gpu::AddressRange> range = gpu::address_range(p);
    if (!range.ok() || key.address < range.value().base ||
        key.bytes > range.value().bytes - (key.address - range.value().base)) {
      return make_status(StatusCode::kProtocolError,
                         "shm: %s names %llu bytes of device memory at %p in this process, which "
                         "is not inside one allocation (freed?)",
                         what, static_cast<unsigned long long>(key.bytes), static_cast<void*>(p));
    }
    return std::unique_ptr<RemoteRegion>(
        new CudaIpcRemote(peer, key.bytes, nullptr, p, transport_id));
  }
  EC_ASSIGN_OR_RETURN(std::shared_ptr<OpenedAllocation> opened, open_allocation(key.handle, what));
  if (key.offset > opened->bytes || key.bytes > opened->bytes - key.offset) {
    return make_status(StatusCode::kProtocolError,
                       "shm: %s names bytes [%llu, %llu) of a GPU allocation that has %zu", what,
                       static_cast<unsigned long long>(key.offset),
                       static_cast<unsigned long long>(key.offset + key.bytes), opened->bytes);
  }
  auto* address = static_cast<uint8_t*>(opened->mapping.base()) + key.offset;
  return std::unique_ptr<RemoteRegion>(
      new CudaIpcRemote(peer, key.bytes, std::move(opened), address, transport_id));
}

}  // namespace eagercomm
