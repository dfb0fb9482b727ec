#include "runtime/gpu.h"

#include "runtime/build_config.h"

#if EAGERCOMM_HAVE_CUDA
#include <cuda_runtime_api.h>
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

MemoryKind detected_kind(const void* p) {
  if (p == nullptr) return MemoryKind::kHost;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {  // no driver or no device: host memory
    cudaGetLastError();                                  // clear the sticky error of a failed query
    return MemoryKind::kHost;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged ? MemoryKind::kCuda
                                                                           : MemoryKind::kHost;
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

Inventory query() {
  Inventory inv;
  inv.reason = "this build has no CUDA (install the CUDA toolkit and reconfigure)";
  return inv;
}

MemoryKind detected_kind(const void*) { return MemoryKind::kHost; }

#endif

}  // namespace eagercomm::gpu
