// CUDA device memory for the transports whose ranks share a host, `inproc` and `shm` (issue #6).
//
//   cuda_memory_available()   whether MemoryKind::kCuda can work in this process, else why not
//                             (no CUDA in the build: kNotSupported; no GPU or driver:
//                             kUnavailable), so both transports refuse it with the same words.
//   allocate_device_zeroed(), check_device_range()
//                             what allocate() and register_memory() of kCuda share.
//   copy_for_write()          write()'s copy: memcpy between host memory, cudaMemcpy (finished
//                             before it returns) when either side is device memory.
//   CudaIpcRegion / CudaIpcRemote
//                             shm's device regions and peers' imports of them. The key carries a
//                             CUDA IPC handle (cuda_ipc_key.h); an importer opens it once per
//                             process and allocation (cached, closed with the last import) and
//                             checks the region lies inside the allocation it opened. An importer
//                             in the owner's own process uses the owner's pointer instead:
//                             cudaIpcOpenMemHandle refuses handles of its own process.
//
// Device memory is never handed out through mapped_address(): callers load from and store to
// what it returns, which the CPU cannot do on device memory; they fall back to write().
//
// Thread-safety: the free functions and import() may be called from any thread (import() shares
// one process-wide table of opened allocations under a mutex; import is set-up, not a data path).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "runtime/gpu.h"
#include "runtime/memory.h"
#include "runtime/status.h"
#include "transport/cuda_ipc/cuda_ipc_key.h"
#include "transport/transport.h"

namespace eagercomm {

// Ok when this process can use CUDA memory; otherwise the error `transport` reports for kCuda.
Status cuda_memory_available(const char* transport);

// `bytes` (> 0) of zeroed device memory of the current device, the zeroes in place on return.
Result<gpu::DeviceBuffer> allocate_device_zeroed(size_t bytes);

// Ok when [p, p + bytes) is device memory inside one allocation; `what` names the call in errors.
Status check_device_range(const void* p, size_t bytes, const char* what);

// How write() moves bytes from memory of kind `src` to memory of kind `dst`.
enum class WriteCopy { kMemcpy, kCudaMemcpy };
WriteCopy write_copy_for(MemoryKind src, MemoryKind dst);
// The copy write_copy_for() chose, complete when it returns (the caller notifies the peer next).
Status copy_for_write(void* dst, MemoryKind dst_kind, const void* src, MemoryKind src_kind,
                      size_t bytes);

// How an importer reaches a peer's device region: through the owner's pointer when the key comes
// from this very process (shm ranks in one process: tests), else by opening the IPC handle.
enum class CudaImportPath { kSameProcess, kIpc };
CudaImportPath cuda_import_path(const CudaIpcKey& key, uint64_t this_process);

// A device region of this rank that peers reach through CUDA IPC.
class CudaIpcRegion final : public MemoryRegion {
 public:
  // allocate(bytes, kCuda): cudaMalloc'ed, zeroed, freed with the region.
  static Result<std::unique_ptr<MemoryRegion>> allocate(size_t bytes, int owner);
  // register_memory(data, bytes, kCuda): the caller's device memory (cudaMalloc'ed: CUDA IPC
  // cannot export other allocations), which the caller keeps alive longer than the region.
  static Result<std::unique_ptr<MemoryRegion>> wrap(void* data, size_t bytes, int owner);

 private:
  CudaIpcRegion(void* data, size_t bytes, std::optional<gpu::DeviceBuffer> owned,
                std::vector<uint8_t> key);
  std::optional<gpu::DeviceBuffer> owned_;
};

// A peer's device region. Only cudaMemcpy reaches it (address() is a device address).
class CudaIpcRemote final : public RemoteRegion {
 public:
  // `key` is unpacked and its owner checked by the caller; `transport_id` tells the importing
  // transport's remote regions from others'. `what` names the key in errors.
  static Result<std::unique_ptr<RemoteRegion>> import(int peer, const CudaIpcKey& key,
                                                      uint64_t transport_id, const char* what);
  uint8_t* address() const { return address_; }
  uint64_t transport_id() const { return transport_id_; }

 private:
  CudaIpcRemote(int peer, size_t size, std::shared_ptr<const void> mapping, uint8_t* address,
                uint64_t transport_id)
      : RemoteRegion(peer, size),
        mapping_(std::move(mapping)),
        address_(address),
        transport_id_(transport_id) {}
  std::shared_ptr<const void> mapping_;  // the opened allocation (IPC path), shared per process
  uint8_t* address_;
  uint64_t transport_id_;
};

}  // namespace eagercomm
