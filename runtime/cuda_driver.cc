#include "runtime/cuda_driver.h"

#include <dlfcn.h>

#include <cstdint>
#include <cstring>

#include "runtime/config.h"
#include "runtime/log.h"

namespace eagercomm::gpu {

namespace {

// The driver ABI as cuda.h defines it, written out so that builds without the toolkit compile
// this file (the values are part of the driver's stable ABI).
using CuResult = int;           // CUresult; 0 is CUDA_SUCCESS
using CuDevice = int;           // CUdevice
using CuContext = void*;        // CUcontext
using CuDevicePtr = uintptr_t;  // CUdeviceptr
constexpr CuResult kCudaSuccess = 0;
constexpr unsigned kAttrMemoryType = 2;    // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr unsigned kAttrIsManaged = 8;     // CU_POINTER_ATTRIBUTE_IS_MANAGED
constexpr uint32_t kMemoryTypeDevice = 2;  // CU_MEMORYTYPE_DEVICE

}  // namespace

// Only entry points that cannot create a context. cuPointerGetAttributes (the plural) answers
// CUDA_SUCCESS with zeroed values for a pointer CUDA does not know, where the singular one fails.
struct CudaDriver::Api {
  CuResult (*init)(unsigned) = nullptr;
  CuResult (*driver_get_version)(int*) = nullptr;
  CuResult (*device_get_count)(int*) = nullptr;
  CuResult (*device_get)(CuDevice*, int) = nullptr;
  CuResult (*primary_ctx_get_state)(CuDevice, unsigned*, int*) = nullptr;
  CuResult (*ctx_get_current)(CuContext*) = nullptr;
  CuResult (*pointer_get_attributes)(unsigned, unsigned*, void**, CuDevicePtr) = nullptr;
};

CudaDriver::CudaDriver(void* handle, std::unique_ptr<Api> api, std::string library)
    : handle_(handle), api_(std::move(api)), library_(std::move(library)) {}

CudaDriver::~CudaDriver() {
  if (handle_ != nullptr) dlclose(handle_);
}

Result<std::unique_ptr<CudaDriver>> CudaDriver::load(const std::string& library) {
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return make_status(StatusCode::kUnavailable,
                       "CUDA driver %s not loaded (%s): no NVIDIA driver on this host",
                       library.c_str(), why != nullptr ? why : "dlopen failed");
  }
  auto api = std::make_unique<Api>();
  const char* missing = nullptr;
  auto resolve = [&](auto& fn, const char* name) {
    void* sym = dlsym(handle, name);
    if (sym == nullptr && missing == nullptr) missing = name;
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(sym);
  };
  resolve(api->init, "cuInit");
  resolve(api->driver_get_version, "cuDriverGetVersion");
  resolve(api->device_get_count, "cuDeviceGetCount");
  resolve(api->device_get, "cuDeviceGet");
  resolve(api->primary_ctx_get_state, "cuDevicePrimaryCtxGetState");
  resolve(api->ctx_get_current, "cuCtxGetCurrent");
  resolve(api->pointer_get_attributes, "cuPointerGetAttributes");
  if (missing != nullptr) {
    dlclose(handle);
    return make_status(StatusCode::kNotSupported,
                       "CUDA driver %s has no %s (a driver older than CUDA 7?)", library.c_str(),
                       missing);
  }
  std::unique_ptr<CudaDriver> driver(new CudaDriver(handle, std::move(api), library));
  driver->api_->driver_get_version(&driver->driver_version_);
  // cuInit fails on a host whose driver sees no device; then no pointer can be device memory.
  if (const CuResult r = driver->api_->init(0); r != kCudaSuccess) {
    EC_DEBUG(kInit, "CUDA driver %s: cuInit failed (error %d): no device memory can exist",
             library.c_str(), r);
    driver->device_count_ = 0;
  } else if (driver->api_->device_get_count(&driver->device_count_) != kCudaSuccess) {
    driver->device_count_ = 0;
  }
  return driver;
}

bool CudaDriver::any_context() {
  if (context_seen_.load(std::memory_order_acquire)) return true;
  if (device_count_ == 0) return false;
  CuContext current = nullptr;
  bool seen = api_->ctx_get_current(&current) == kCudaSuccess && current != nullptr;
  for (int i = 0; !seen && i < device_count_; ++i) {
    CuDevice dev = 0;
    unsigned flags = 0;
    int active = 0;
    seen = api_->device_get(&dev, i) == kCudaSuccess &&
           api_->primary_ctx_get_state(dev, &flags, &active) == kCudaSuccess && active != 0;
  }
  if (seen) context_seen_.store(true, std::memory_order_release);
  return seen;
}

MemoryKind CudaDriver::classify(const void* p) {
  if (p == nullptr || !any_context()) return MemoryKind::kHost;
  // Zeroed wide slots: the driver writes an unsigned int for the type and a bool-sized flag.
  uint64_t type = 0, managed = 0;
  unsigned attrs[2] = {kAttrMemoryType, kAttrIsManaged};
  void* data[2] = {&type, &managed};
  if (api_->pointer_get_attributes(2, attrs, data, reinterpret_cast<CuDevicePtr>(p)) !=
      kCudaSuccess) {
    return MemoryKind::kHost;
  }
  uint32_t memory_type = 0;
  std::memcpy(&memory_type, &type, sizeof(memory_type));
  return memory_type == kMemoryTypeDevice || managed != 0 ? MemoryKind::kCuda : MemoryKind::kHost;
}

namespace {

struct ProcessDriver {
  std::unique_ptr<CudaDriver> driver;
  std::string reason;
};

const ProcessDriver& process_driver_state() {
  static const ProcessDriver state = [] {
    ProcessDriver s;
    const Result<const RuntimeConfig*>& process = process_runtime_config();
    if (!process.ok()) {
      s.reason = "the EAGERCOMM_* environment is invalid: " + process.status().message();
      return s;
    }
    const RuntimeConfig* config = *process;
    if (!config->cuda) {
      s.reason = "EAGERCOMM_CUDA=off: pointers are not checked (every buffer is host memory)";
      EC_INFO(kInit, "%s", s.reason.c_str());
      return s;
    }
    Result<std::unique_ptr<CudaDriver>> loaded = CudaDriver::load(config->cuda_driver);
    if (!loaded.ok()) {
      s.reason = loaded.status().message();
      EC_DEBUG(kInit, "%s", s.reason.c_str());
      return s;
    }
    s.driver = std::move(*loaded);
    EC_DEBUG(kInit, "CUDA driver %s loaded: version %d, %d device(s)", s.driver->library().c_str(),
             s.driver->driver_version(), s.driver->device_count());
    return s;
  }();
  return state;
}

}  // namespace

CudaDriver* process_driver() { return process_driver_state().driver.get(); }

const std::string& process_driver_reason() { return process_driver_state().reason; }

}  // namespace eagercomm::gpu
