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
// The copy is enqueued on `stream` (a cudaStream_t; null: the legacy default stream), so it runs
// after the work enqueued there before the call, and that stream is then waited for. It runs
// with the device that owns the device-side pointer current (its legacy default stream, when
// `stream` is null); the caller's current device is restored.
Status copy_and_wait(void* dst, const void* src, size_t bytes, void* stream = nullptr);

// The device allocation that holds `p` (the driver's cuMemGetAddressRange), for bounds checks of
// registered ranges and of peers' allocations opened through CUDA IPC. kInvalidArgument when `p`
// is not device memory, kUnavailable without a GPU.
struct AddressRange {
  uintptr_t base = 0;
  size_t bytes = 0;
};
Result<AddressRange> address_range(const void* p);

// Zeroes device memory, finished when it returns (plain cudaMemset is not: a peer's first write
// into memory just published could be overwritten by it). Waits for this call's own work only,
// not for the device's other streams.
Status zero(void* p, size_t bytes);

// Makes `device` the calling thread's current CUDA device and restores the thread's previous
// context when it goes: the calls made meanwhile (streams, copies, kernels, events) act on
// `device`, whichever device the application had selected. The previous state is restored
// through the driver's current context, not with cudaSetDevice: since CUDA 12 that creates the
// primary context of the device it names, and a thread that had none current (the progress
// thread, an application thread that never used CUDA) would otherwise get one on GPU 0 (~0.5 GB).
// Nothing is changed when `device` is already current. Move-only.
class DeviceScope {
 public:
  // kUnavailable without a GPU (or a CUDA build), kInvalidArgument for a device that does not
  // exist.
  static Result<DeviceScope> enter(int device);
  DeviceScope(DeviceScope&& o) noexcept
      : restore_(o.restore_), context_(o.context_), device_(o.device_) {
    o.restore_ = false;
  }
  DeviceScope& operator=(DeviceScope&&) = delete;
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  ~DeviceScope();

 private:
  DeviceScope(bool restore, void* context, int device)
      : restore_(restore), context_(context), device_(device) {}
  bool restore_ = false;
  void* context_ = nullptr;  // the CUcontext current before (null: none)
  int device_ = -1;          // the runtime's current device before
};

// Page-locked host memory (cudaHostAlloc, portable: pinned for every device's copies), freed
// when the object goes: the staging buffers of transports that cannot reach GPU memory directly.
// Move-only.
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

// A CUDA stream (cudaStreamNonBlocking) of one device, destroyed when the object goes: work
// enqueued on it is ordered after nothing but itself (wait_for() adds an order). Move-only.
class Stream {
 public:
  // A stream of `device`; the caller's current device is left as it was. kUnavailable without a
  // GPU (or a CUDA build), kInvalidArgument for a device that does not exist.
  static Result<Stream> create(int device);
  Stream(Stream&& o) noexcept : handle_(o.handle_), event_(o.event_), device_(o.device_) {
    o.handle_ = nullptr;
    o.event_ = nullptr;
  }
  Stream& operator=(Stream&& o) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();
  // The cudaStream_t, as the kernels' launchers take it.
  void* handle() const { return handle_; }
  // The device the stream belongs to: work on it runs with that device current (DeviceScope).
  int device() const { return device_; }
  // Waits for everything enqueued so far.
  Status synchronize() const;
  // Orders the work enqueued on this stream from now on after the work enqueued so far on
  // `other` (a cudaStream_t of the same device; null: the legacy default stream): an event
  // recorded there, waited for here; the host does not wait. This stream is non-blocking:
  // without it a copy of the caller's buffer could read it before the kernel or the pageable
  // cudaMemcpy that writes it has finished. Call it with this stream's device current.
  Status wait_for(void* other) const;

 private:
  Stream(void* handle, void* event, int device) : handle_(handle), event_(event), device_(device) {}
  void* handle_ = nullptr;
  void* event_ = nullptr;  // a cudaEvent_t for wait_for()
  int device_ = 0;
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
// The calling thread's current CUDA device (cudaGetDevice); kUnavailable without a GPU.
Result<int> current_device();

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
