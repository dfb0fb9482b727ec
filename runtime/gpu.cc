#include "runtime/gpu.h"

#include "runtime/build_config.h"
#include "runtime/cuda_driver.h"

#if EAGERCOMM_HAVE_CUDA
#include <cudaTypedefs.h>  // PFN_ types of driver entry points: a header, nothing is linked
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstring>
#include <optional>
#endif

namespace eagercomm::gpu {

Status check_kind(MemoryKind declared, MemoryKind detected, const char* what) {
  if (declared == detected) return Status::Ok();
  if (detected == MemoryKind::kCuda) {
    return make_status(StatusCode::kInvalidArgument,
                       "%s: the buffer is CUDA device memory but was passed as host memory "
                       "(MemoryKind::kHost)",
                       what);
  }
  return make_status(StatusCode::kInvalidArgument,
                     "%s: the buffer was passed as CUDA memory (MemoryKind::kCuda) but CUDA does "
                     "not know it as device memory (a host pointer?)",
                     what);
}

// Through the driver in every build, CUDA or not (runtime/cuda_driver.h): no context is created.
MemoryKind detected_kind(const void* p) {
  CudaDriver* driver = p != nullptr ? process_driver() : nullptr;
  return driver != nullptr ? driver->classify(p) : MemoryKind::kHost;
}

Status check_usable(const char* what) {
  if (available()) return Status::Ok();
  return make_status(StatusCode::kUnavailable,
                     "%s: the buffer is CUDA device memory, but this process cannot use CUDA: %s",
                     what, query().reason.c_str());
}

#if EAGERCOMM_HAVE_CUDA

bool cuda_built() { return true; }

Inventory query() {
  Inventory inv;
  cudaRuntimeGetVersion(&inv.runtime_version);
  if (cudaDriverGetVersion(&inv.driver_version) != cudaSuccess || inv.driver_version == 0) {
    inv.driver_version = 0;
    inv.reason = "no CUDA driver (libcuda.so.1 not found: no NVIDIA GPU or driver here)";
    return inv;
  }
  int count = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    inv.reason = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
    return inv;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    Device d;
    d.index = i;
    d.name = prop.name;
    d.cc_major = prop.major;
    d.cc_minor = prop.minor;
    d.memory_bytes = prop.totalGlobalMem;
    // The driver's CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED (124); the runtime's enum lists the value
    // as reserved but passes it through. An error just means "no".
    int dmabuf = 0;
    if (cudaDeviceGetAttribute(&dmabuf, static_cast<cudaDeviceAttr>(124), i) == cudaSuccess) {
      d.dmabuf = dmabuf != 0;
    }
    inv.devices.push_back(std::move(d));
  }
  if (inv.devices.empty()) inv.reason = "the CUDA driver lists no GPU";
  return inv;
}

namespace {
Status cuda_error(cudaError_t e, const char* what) {
  cudaGetLastError();
  const StatusCode code = e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver
                              ? StatusCode::kUnavailable
                          : e == cudaErrorMemoryAllocation ? StatusCode::kNoMemory
                                                           : StatusCode::kInternal;
  return make_status(code, "%s: %s", what, cudaGetErrorString(e));
}
}  // namespace

Result<DeviceBuffer> DeviceBuffer::allocate(size_t bytes) {
  void* p = nullptr;
  if (const cudaError_t e = cudaMalloc(&p, bytes); e != cudaSuccess) {
    return cuda_error(e, "cudaMalloc");
  }
  return DeviceBuffer(p, bytes);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}

Status copy(void* dst, const void* src, size_t bytes) {
  const cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
  return e == cudaSuccess ? Status::Ok() : cuda_error(e, "cudaMemcpy");
}

Status synchronize() {
  const cudaError_t e = cudaDeviceSynchronize();
  return e == cudaSuccess ? Status::Ok() : cuda_error(e, "cudaDeviceSynchronize");
}

Status copy_and_wait(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0) return Status::Ok();
  // The device whose memory is involved (dst's first): its legacy default stream is the one a
  // null `stream` means, and a caller's stream must be used with its device current.
  Result<int> device = device_of(dst);
  if (!device.ok()) device = device_of(src);
  std::optional<DeviceScope> scope;
  if (device.ok()) {
    EC_ASSIGN_OR_RETURN(DeviceScope entered, DeviceScope::enter(*device));
    scope.emplace(std::move(entered));
  }
  const auto s = stream != nullptr ? static_cast<cudaStream_t>(stream) : cudaStreamLegacy;
  if (const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s);
      e != cudaSuccess) {
    return cuda_error(e, "cudaMemcpyAsync");
  }
  const cudaError_t e = cudaStreamSynchronize(s);
  return e == cudaSuccess ? Status::Ok() : cuda_error(e, "cudaStreamSynchronize");
}

namespace {

// A driver entry point reached through the runtime (nothing links libcuda); null when absent.
void* driver_entry(const char* name, int version) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050
  const cudaError_t e =
      cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &found);
#else
  (void)version;
  const cudaError_t e = cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &found);
#endif
  if (e != cudaSuccess) cudaGetLastError();
  return e == cudaSuccess && found == cudaDriverEntryPointSuccess ? fn : nullptr;
}

struct ContextApi {
  PFN_cuCtxGetCurrent_v4000 get = nullptr;
  PFN_cuCtxSetCurrent_v4000 set = nullptr;
};

const ContextApi& context_api() {
  static const ContextApi api = [] {
    ContextApi a;
    a.get = reinterpret_cast<PFN_cuCtxGetCurrent_v4000>(driver_entry("cuCtxGetCurrent", 4000));
    a.set = reinterpret_cast<PFN_cuCtxSetCurrent_v4000>(driver_entry("cuCtxSetCurrent", 4000));
    return a;
  }();
  return api;
}

}  // namespace

Result<DeviceScope> DeviceScope::enter(int device) {
  int previous = 0;
  if (const cudaError_t e = cudaGetDevice(&previous); e != cudaSuccess) {
    return cuda_error(e, "cudaGetDevice");
  }
  const ContextApi& api = context_api();
  CUcontext context = nullptr;
  if (api.get != nullptr && api.get(&context) != CUDA_SUCCESS) context = nullptr;
  // With a context current on `device` already there is nothing to do (without one, the
  // runtime's "current device" is only a default that no context backs yet).
  if (previous == device && context != nullptr) return DeviceScope(false, nullptr, -1);
  if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    Status s = cuda_error(e, "cudaSetDevice");
    if (e == cudaErrorInvalidDevice) {
      return make_status(StatusCode::kInvalidArgument, "CUDA device %d: %s", device,
                         s.message().c_str());
    }
    return s;
  }
  return DeviceScope(true, context, previous);
}

DeviceScope::~DeviceScope() {
  if (!restore_) return;
  const ContextApi& api = context_api();
  if (api.set != nullptr) {
    // The runtime follows the thread's current context: restoring it restores the device the
    // application was using, and restoring "none" creates nothing.
    api.set(static_cast<CUcontext>(context_));
  } else if (context_ != nullptr) {
    cudaSetDevice(device_);  // that device's context exists: it was current
  }
}

bool available() {
  // cudaDriverGetVersion first: without a driver it answers 0 without initialising anything.
  static const bool any = [] {
    int driver = 0;
    if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) {
      cudaGetLastError();
      return false;
    }
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return count > 0;
  }();
  return any;
}

Result<Stream> Stream::create(int device) {
  EC_ASSIGN_OR_RETURN(DeviceScope scope, DeviceScope::enter(device));
  cudaStream_t s = nullptr;
  if (const cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
      e != cudaSuccess) {
    return cuda_error(e, "cudaStreamCreateWithFlags");
  }
  cudaEvent_t ev = nullptr;
  if (const cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
      e != cudaSuccess) {
    cudaStreamDestroy(s);
    return cuda_error(e, "cudaEventCreateWithFlags");
  }
  return Stream(s, ev, device);
}

Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    if (event_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
    if (handle_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(handle_));
    handle_ = o.handle_;
    event_ = o.event_;
    device_ = o.device_;
    o.handle_ = nullptr;
    o.event_ = nullptr;
  }
  return *this;
}

Stream::~Stream() {
  if (event_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
  if (handle_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(handle_));
}

Status Stream::wait_for(void* other) const {
  const auto ev = static_cast<cudaEvent_t>(event_);
  const auto s = other != nullptr ? static_cast<cudaStream_t>(other) : cudaStreamLegacy;
  if (const cudaError_t e = cudaEventRecord(ev, s); e != cudaSuccess) {
    return cuda_error(e, other != nullptr ? "cudaEventRecord(the caller's stream)"
                                          : "cudaEventRecord(legacy default stream)");
  }
  const cudaError_t e = cudaStreamWaitEvent(static_cast<cudaStream_t>(handle_), ev, 0);
  return e == cudaSuccess ? Status::Ok() : cuda_error(e, "cudaStreamWaitEvent");
}

Status Stream::synchronize() const {
  const cudaError_t e = cudaStreamSynchronize(static_cast<cudaStream_t>(handle_));
  return e == cudaSuccess ? Status::Ok() : cuda_error(e, "cudaStreamSynchronize");
}

Status copy_async(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0) return Status::Ok();
  const cudaError_t e =
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream));
  return e == cudaSuccess ? Status::Ok() : cuda_error(e, "cudaMemcpyAsync");
}

Status zero(void* p, size_t bytes) {
  if (bytes == 0) return Status::Ok();
  // On this thread's per-thread default stream, waited for alone: cudaDeviceSynchronize would
  // wait for the application's streams too.
  if (const cudaError_t e = cudaMemsetAsync(p, 0, bytes, cudaStreamPerThread); e != cudaSuccess) {
    return cuda_error(e, "cudaMemsetAsync");
  }
  const cudaError_t e = cudaStreamSynchronize(cudaStreamPerThread);
  return e == cudaSuccess ? Status::Ok() : cuda_error(e, "cudaStreamSynchronize");
}

Result<PinnedBuffer> PinnedBuffer::allocate(size_t bytes) {
  void* p = nullptr;
  if (const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable); e != cudaSuccess) {
    return cuda_error(e, "cudaHostAlloc");
  }
  return PinnedBuffer(p, bytes);
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr) cudaFreeHost(data_);
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
  }
  return *this;
}

PinnedBuffer::~PinnedBuffer() {
  if (data_ != nullptr) cudaFreeHost(data_);
}

Result<DmaBuf> export_dmabuf(const void* p, size_t bytes) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050
  cudaError_t e = cudaGetDriverEntryPointByVersion("cuMemGetHandleForAddressRange", &fn, 11070,
                                                   cudaEnableDefault, &found);
#else
  cudaError_t e =
      cudaGetDriverEntryPoint("cuMemGetHandleForAddressRange", &fn, cudaEnableDefault, &found);
#endif
  if (e != cudaSuccess)
    return cuda_error(e, "cudaGetDriverEntryPoint(cuMemGetHandleForAddressRange)");
  if (found != cudaDriverEntryPointSuccess || fn == nullptr) {
    return Status(StatusCode::kNotSupported,
                  "the CUDA driver has no cuMemGetHandleForAddressRange (driver older than 11.7)");
  }
  // The exported range must be aligned to the host page size on both ends.
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t base = begin & ~(page - 1);
  const uintptr_t end = (begin + bytes + page - 1) & ~(page - 1);
  int fd = -1;
  const CUresult r = reinterpret_cast<PFN_cuMemGetHandleForAddressRange_v11070>(fn)(
      &fd, static_cast<CUdeviceptr>(base), end - base, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
  if (r != CUDA_SUCCESS) {
    return make_status(
        r == CUDA_ERROR_NOT_SUPPORTED ? StatusCode::kNotSupported : StatusCode::kInvalidArgument,
        "cuMemGetHandleForAddressRange(%zu bytes at %p): CUDA driver error %d", bytes, p,
        static_cast<int>(r));
  }
  return DmaBuf{UniqueFd(fd), begin - base};
}

Result<int> device_of(const void* p) {
  cudaPointerAttributes a{};
  if (const cudaError_t e = cudaPointerGetAttributes(&a, p); e != cudaSuccess) {
    return cuda_error(e, "cudaPointerGetAttributes");
  }
  if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged) {
    return make_status(StatusCode::kInvalidArgument, "%p is not device memory", p);
  }
  return a.device;
}

Result<int> current_device() {
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) {
    return cuda_error(e, "cudaGetDevice");
  }
  return device;
}

Result<RdmaWriteCaps> rdma_write_caps(int device) {
  int count = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    return cuda_error(e, "cudaGetDeviceCount");
  }
  if (device < 0 || device >= count) {
    return make_status(StatusCode::kInvalidArgument, "CUDA: no GPU %d (%d present)", device, count);
  }
  RdmaWriteCaps caps;
  // An attribute this driver does not know reads as 0: "no ordering", "no flush".
  if (cudaDeviceGetAttribute(&caps.ordering, cudaDevAttrGPUDirectRDMAWritesOrdering, device) !=
      cudaSuccess) {
    cudaGetLastError();
    caps.ordering = 0;
  }
  if (cudaDeviceGetAttribute(&caps.flush_options, cudaDevAttrGPUDirectRDMAFlushWritesOptions,
                             device) != cudaSuccess) {
    cudaGetLastError();
    caps.flush_options = 0;
  }
  return caps;
}

Status flush_rdma_writes(int device) {
  // The flush targets the current device: the owner of the memory, not the polling thread's
  // (the progress thread has no context, and restoring one with cudaSetDevice would create it).
  EC_ASSIGN_OR_RETURN(DeviceScope scope, DeviceScope::enter(device));
  const cudaError_t e = cudaDeviceFlushGPUDirectRDMAWrites(
      cudaFlushGPUDirectRDMAWritesTargetCurrentDevice, cudaFlushGPUDirectRDMAWritesToOwner);
  return e == cudaSuccess ? Status::Ok() : cuda_error(e, "cudaDeviceFlushGPUDirectRDMAWrites");
}

Result<AddressRange> address_range(const void* p) {
  // Only the driver's cuMemGetAddressRange tells; it is reached like the one in export_dmabuf:
  // through the runtime, without linking libcuda.
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050
  cudaError_t e = cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 3020,
                                                   cudaEnableDefault, &found);
#else
  cudaError_t e = cudaGetDriverEntryPoint("cuMemGetAddressRange", &fn, cudaEnableDefault, &found);
#endif
  if (e != cudaSuccess) return cuda_error(e, "cudaGetDriverEntryPoint(cuMemGetAddressRange)");
  if (found != cudaDriverEntryPointSuccess || fn == nullptr) {
    return Status(StatusCode::kUnavailable, "the CUDA driver has no cuMemGetAddressRange");
  }
  CUdeviceptr b = 0;
  size_t size = 0;
  if (const CUresult r = reinterpret_cast<PFN_cuMemGetAddressRange_v3020>(fn)(
          &b, &size, reinterpret_cast<CUdeviceptr>(p));
      r != CUDA_SUCCESS) {
    return make_status(StatusCode::kInvalidArgument,
                       "CUDA: %p is not in a device allocation (driver error %d)", p,
                       static_cast<int>(r));
  }
  return AddressRange{static_cast<uintptr_t>(b), size};
}

Result<IpcExport> ipc_export(const void* p) {
  // cudaIpcGetMemHandle names the whole allocation around p; the importer needs p's offset in it.
  EC_ASSIGN_OR_RETURN(const AddressRange range, address_range(p));
  const uintptr_t b = range.base;
  void* base = reinterpret_cast<void*>(b);
  cudaIpcMemHandle_t h{};
  if (const cudaError_t err = cudaIpcGetMemHandle(&h, base); err != cudaSuccess) {
    cudaGetLastError();
    return make_status(err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver
                           ? StatusCode::kUnavailable
                           : StatusCode::kInvalidArgument,
                       "cudaIpcGetMemHandle(%p): %s (only cudaMalloc'ed memory can be shared "
                       "between processes)",
                       p, cudaGetErrorString(err));
  }
  IpcExport out;
  static_assert(sizeof(h) == sizeof(out.handle));
  std::memcpy(out.handle.data(), &h, sizeof(h));
  out.offset = reinterpret_cast<uintptr_t>(p) - b;
  return out;
}

Result<IpcMapping> IpcMapping::open(const IpcHandle& handle) {
  cudaIpcMemHandle_t h{};
  std::memcpy(&h, handle.data(), sizeof(h));
  void* p = nullptr;
  if (const cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
      e != cudaSuccess) {
    cudaGetLastError();
    return make_status(e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver
                           ? StatusCode::kUnavailable
                           : StatusCode::kInvalidArgument,
                       "cudaIpcOpenMemHandle: %s (a handle from another host, or from this "
                       "process?)",
                       cudaGetErrorString(e));
  }
  return IpcMapping(p);
}

IpcMapping& IpcMapping::operator=(IpcMapping&& o) noexcept {
  if (this != &o) {
    if (base_ != nullptr) cudaIpcCloseMemHandle(base_);
    base_ = o.base_;
    o.base_ = nullptr;
  }
  return *this;
}

IpcMapping::~IpcMapping() {
  if (base_ != nullptr) cudaIpcCloseMemHandle(base_);
}

#else

bool cuda_built() { return false; }

Result<DeviceBuffer> DeviceBuffer::allocate(size_t) {
  return Status(StatusCode::kUnavailable, "this build has no CUDA");
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  data_ = o.data_;
  size_ = o.size_;
  o.data_ = nullptr;
  return *this;
}
DeviceBuffer::~DeviceBuffer() = default;
Status copy(void*, const void*, size_t) {
  return Status(StatusCode::kUnavailable, "this build has no CUDA");
}
Status synchronize() { return Status(StatusCode::kUnavailable, "this build has no CUDA"); }
Status copy_and_wait(void*, const void*, size_t, void*) {
  return Status(StatusCode::kUnavailable, "this build has no CUDA");
}
Result<AddressRange> address_range(const void*) {
  return Status(StatusCode::kUnavailable, "this build has no CUDA");
}
Status zero(void*, size_t) { return Status(StatusCode::kUnavailable, "this build has no CUDA"); }
Result<PinnedBuffer> PinnedBuffer::allocate(size_t) {
  return Status(StatusCode::kUnavailable, "this build has no CUDA");
}
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  data_ = o.data_;
  size_ = o.size_;
  o.data_ = nullptr;
  return *this;
}
PinnedBuffer::~PinnedBuffer() = default;
Result<DmaBuf> export_dmabuf(const void*, size_t) {
  return Status(StatusCode::kUnavailable, "this build has no CUDA");
}
Result<int> device_of(const void*) {
  return Status(StatusCode::kUnavailable, "this build has no CUDA");
}
Result<int> current_device() { return Status(StatusCode::kUnavailable, "this build has no CUDA"); }
Result<RdmaWriteCaps> rdma_write_caps(int) {
  return Status(StatusCode::kUnavailable, "this build has no CUDA");
}
Status flush_rdma_writes(int) { return Status(StatusCode::kUnavailable, "this build has no CUDA"); }
Result<IpcExport> ipc_export(const void*) {
  return Status(StatusCode::kUnavailable, "this build has no CUDA");
}
Result<IpcMapping> IpcMapping::open(const IpcHandle&) {
  return Status(StatusCode::kUnavailable, "this build has no CUDA");
}
IpcMapping& IpcMapping::operator=(IpcMapping&& o) noexcept {
  base_ = o.base_;
  o.base_ = nullptr;
  return *this;
}
IpcMapping::~IpcMapping() = default;

Inventory query() {
  Inventory inv;
  inv.reason = "this build has no CUDA (install the CUDA toolkit and reconfigure)";
  return inv;
}

bool available() { return false; }
Result<DeviceScope> DeviceScope::enter(int) {
  return Status(StatusCode::kUnavailable, "this build has no CUDA");
}
DeviceScope::~DeviceScope() = default;
Result<Stream> Stream::create(int) {
  return Status(StatusCode::kUnavailable, "this build has no CUDA");
}
Stream& Stream::operator=(Stream&& o) noexcept {
  handle_ = o.handle_;
  event_ = o.event_;
  device_ = o.device_;
  o.handle_ = nullptr;
  o.event_ = nullptr;
  return *this;
}
Stream::~Stream() = default;
Status Stream::synchronize() const {
  return Status(StatusCode::kUnavailable, "this build has no CUDA");
}
Status Stream::wait_for(void*) const {
  return Status(StatusCode::kUnavailable, "this build has no CUDA");
}
Status copy_async(void*, const void*, size_t, void*) {
  return Status(StatusCode::kUnavailable, "this build has no CUDA");
}

#endif

}  // namespace eagercomm::gpu
