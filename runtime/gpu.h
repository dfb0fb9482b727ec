// GPUs as the CUDA runtime reports them, and what kind of memory a pointer is (issue #6).
//
// Used through the CUDA runtime API only, linked statically: binaries start on machines with no
// GPU and no driver, where query() says why there is none and every pointer is host memory.
// Builds without the CUDA toolkit compile the same interface with the same answers.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "runtime/memory.h"
#include "runtime/status.h"

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

// What CUDA says `p` points to: kCuda for device (or managed) memory, kHost otherwise. Always
// kHost without CUDA or without a GPU (then no pointer can be device memory). Costs a driver
// call (~1 us): for set-up paths, not per message.
MemoryKind detected_kind(const void* p);

// The error for a buffer that the caller declared as `declared` but CUDA reports as `detected`
// (a device pointer passed as host memory, or the reverse), naming `what`; Ok when they agree.
Status check_kind(MemoryKind declared, MemoryKind detected, const char* what);

// Device memory of the current device, freed when the object goes. Move-only.
class DeviceBuffer {
 public:
  // kUnavailable without a GPU (or a CUDA build), kNoMemory when the device is full.
  static Result<DeviceBuffer> allocate(size_t bytes);
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

// detected_kind() then check_kind().
inline Status check_buffer_kind(const void* p, MemoryKind declared, const char* what) {
  return check_kind(declared, detected_kind(p), what);
}

}  // namespace eagercomm::gpu
