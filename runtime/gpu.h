// GPUs as the CUDA runtime reports them, and what kind of memory a pointer is (issue #6).
//
// Used through the CUDA runtime API only, linked statically: binaries start on machines with no
// GPU and no driver, where query() says why there is none and every pointer is host memory.
// Builds without the CUDA toolkit compile the same interface with the same answers.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/memory.h"
#include "runtime/status.h"
#include "runtime/unique_fd.h"

namespace eagercomm::gpu {

struct Device {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;  // compute capability
  size_t memory_bytes = 0;
  bool dmabuf = false;  // the driver can export its memory as dma-buf (GPUDirect without modules)
};

struct Inventory {
  std::vector<Device> devices;
  int driver_version = 0;   // 12040 = 12.4; 0 when no driver
  int runtime_version = 0;  // of the CUDA runtime this build links; 0 without CUDA
  std::string reason;       // why there is no device
};

// Whether this build links the CUDA runtime.
bool cuda_built();

// The GPUs of this machine. Never fails: no driver, no device or no CUDA build end up in reason.
Inventory query();

// What the CUDA driver says `p` points to: kCuda for device (or managed) memory, kHost
// otherwise. Asked through runtime/cuda_driver.h in every build, also without the CUDA toolkit,
// and never creates a context: kHost without a driver, with EAGERCOMM_CUDA=off, and while the
// process has no CUDA context (no pointer can be device memory then; the check is a few driver
// lookups). Once a context exists, one driver call per pointer: per collective, not per message.
MemoryKind detected_kind(const void* p);

// Ok when this process can work on device memory (a CUDA build and a GPU); else kUnavailable
// naming `what` and why not (no CUDA in this build, no driver, a driver older than the runtime).
// For a buffer that detected_kind() found to be device memory: refused, not handed to the host.
Status check_usable(const char* what);

// The error for a buffer that the caller declared as `declared` but CUDA reports as `detected`
// (a device pointer passed as host memory, or the reverse), naming `what`; Ok when they agree.
Status check_kind(MemoryKind declared, MemoryKind detected, const char* what);

// Device memory of the current device, freed when the object goes. Move-only.
class DeviceBuffer {
 public:
  // kUnavailable without a GPU (or a CUDA build), kNoMemory when the device is full.
  static Result<DeviceBuffer> allocate(size_t bytes);
  DeviceBuffer() = default;  // empty: data() is null
  DeviceBuffer(DeviceBuffer&& o) noexcept : data_(o.data_), size_(o.size_) { o.data_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();
  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  DeviceBuffer(void* data, size_t size) : data_(data), size_(size) {}
  void* data_ = nullptr;
  size_t size_ = 0;
};

// cudaMemcpy in whichever direction the pointers say (host or device on either side).
Status copy(void* dst, const void* src, size_t bytes);
// Waits for all work on the current device.
Status synchronize();

// cudaMemcpy in whichever direction the pointers say, finished when it returns: the bytes are in
// `dst` for every reader, another thread's or (through CUDA IPC) another process's, which plain
// cudaMemcpy does not promise (a copy to device memory may still be in flight when it returns).
// It runs on this thread's default stream and waits for that stream alone, so the work that
// produced `src` must be finished first (work on the legacy default stream is waited for).
Status copy_and_wait(void* dst, const void* src, size_t bytes);

// The device allocation that holds `p` (the driver's cuMemGetAddressRange), for bounds checks of
// registered ranges and of peers' allocations opened through CUDA IPC. kInvalidArgument when `p`
// is not device memory, kUnavailable without a GPU.
struct AddressRange {
  uintptr_t base = 0;
  size_t bytes = 0;
};
Result<AddressRange> address_range(const void* p);

// cudaMemset to zero (device memory).
Status zero(void* p, size_t bytes);

// Page-locked host memory (cudaHostAlloc), freed when the object goes: the staging buffers of
// transports that cannot reach GPU memory directly. Move-only.
class PinnedBuffer {
 public:
  // kUnavailable without a GPU (or a CUDA build).
  static Result<PinnedBuffer> allocate(size_t bytes);
  PinnedBuffer() = default;  // empty: data() is null
  PinnedBuffer(PinnedBuffer&& o) noexcept : data_(o.data_), size_(o.size_) { o.data_ = nullptr; }
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();
  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  PinnedBuffer(void* data, size_t size) : data_(data), size_(size) {}
  void* data_ = nullptr;
  size_t size_ = 0;
};

// Whether the CUDA runtime reports at least one GPU. Asked once per process and cached: the first
// call initialises the runtime (it loads the driver; no context yet). False in builds without
// CUDA. Host paths ask detected_kind() first and this only for a device buffer.
bool available();

// A CUDA stream (cudaStreamNonBlocking) of the current device, destroyed when the object goes:
// work enqueued on it is ordered after nothing but itself. Move-only.
class Stream {
 public:
  // kUnavailable without a GPU (or a CUDA build).
  static Result<Stream> create();
  Stream(Stream&& o) noexcept : handle_(o.handle_), event_(o.event_) {
    o.handle_ = nullptr;
    o.event_ = nullptr;
  }
  Stream& operator=(Stream&& o) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();
  // The cudaStream_t, as the kernels' launchers take it.
  void* handle() const { return handle_; }
  // Waits for everything enqueued so far.
  Status synchronize() const;
  // Orders the work enqueued on this stream from now on after the work enqueued so far on the
  // legacy default stream (an event recorded there, waited for here; the host does not wait).
  // This stream is non-blocking: without it a copy of the caller's buffer could read it before
  // the kernel or the pageable cudaMemcpy that writes it has finished.
  Status after_legacy_default() const;

 private:
  Stream(void* handle, void* event) : handle_(handle), event_(event) {}
  void* handle_ = nullptr;
  void* event_ = nullptr;  // a cudaEvent_t for after_legacy_default()
};

// Enqueues cudaMemcpyAsync in whichever direction the pointers say on `stream` (a cudaStream_t);
// the bytes are in `dst` once the stream is synchronised.
Status copy_async(void* dst, const void* src, size_t bytes, void* stream);

// GPUDirect RDMA through dma-buf: a file descriptor for the device pages under [p, p + bytes),
// from the driver's cuMemGetHandleForAddressRange (reached through cudaGetDriverEntryPoint, so
// nothing links libcuda). The exported range is page aligned: `offset` is where p lies in it,
// which is what ibv_reg_dmabuf_mr() takes. kNotSupported when the driver cannot export dma-bufs
// (older than 11.7 / kernel without dma-buf support), kUnavailable without a GPU.
struct DmaBuf {
  UniqueFd fd;
  uint64_t offset = 0;
};
Result<DmaBuf> export_dmabuf(const void* p, size_t bytes);

// The device that owns device (or managed) memory `p`; kInvalidArgument for host memory.
Result<int> device_of(const void* p);

// What `device` offers for NIC writes into its memory (GPUDirect RDMA): the values of
// cudaDevAttrGPUDirectRDMAWritesOrdering and cudaDevAttrGPUDirectRDMAFlushWritesOptions (0 where
// the attribute is unknown). transport/verbs/gpudirect.h decides from them.
struct RdmaWriteCaps {
  int ordering = 0;
  int flush_options = 0;
};
Result<RdmaWriteCaps> rdma_write_caps(int device);

// Makes writes that a NIC made into `device`'s memory visible to work the host launches on it
// from now on: cudaDeviceFlushGPUDirectRDMAWrites, run with `device` current (on the calling
// thread, whose current device is restored). Call it only where rdma_write_caps says the device
// needs and supports it. See transport/verbs/verbs_transport.cc for why the verbs transport calls
// it before delivering a notification.
Status flush_rdma_writes(int device);

// CUDA IPC: a handle for a cudaMalloc'ed range that another process on the host can open.
using IpcHandle = std::array<uint8_t, 64>;  // cudaIpcMemHandle_t's bytes
// `p` must be device memory; the handle names its whole allocation, so `offset` says where `p`
// is in it. kUnavailable without a GPU, kInvalidArgument for memory CUDA IPC cannot export.
struct IpcExport {
  IpcHandle handle{};
  uint64_t offset = 0;
};
Result<IpcExport> ipc_export(const void* p);

// A peer process's device allocation opened with cudaIpcOpenMemHandle; closed when the object
// goes. Move-only. Within one process (inproc) no handle is needed: pointers are shared.
class IpcMapping {
 public:
  // kUnavailable without a GPU, kInvalidArgument for a handle CUDA refuses (another host's, or
  // one of this very process: cudaIpcOpenMemHandle refuses those).
  static Result<IpcMapping> open(const IpcHandle& handle);
  IpcMapping(IpcMapping&& o) noexcept : base_(o.base_) { o.base_ = nullptr; }
  IpcMapping& operator=(IpcMapping&& o) noexcept;
  IpcMapping(const IpcMapping&) = delete;
  IpcMapping& operator=(const IpcMapping&) = delete;
  ~IpcMapping();
  void* base() const { return base_; }

 private:
  explicit IpcMapping(void* base) : base_(base) {}
  void* base_ = nullptr;
};

// detected_kind() then check_kind().
inline Status check_buffer_kind(const void* p, MemoryKind declared, const char* what) {
  return check_kind(declared, detected_kind(p), what);
}

}  // namespace eagercomm::gpu
