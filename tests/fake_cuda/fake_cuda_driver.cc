// A stand-in for libcuda.so.1 with the entry points runtime/cuda_driver.cc resolves, for
// tests/runtime/cuda_driver_test.cc on machines without a GPU: devices, primary contexts, a current
// context and "device" address ranges are set by the test through fake_cuda_* functions, and
// every call is counted. It also exports the entry points that would create a context or
// allocate, counting calls, so that a test can show eagercomm never reaches them.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

namespace {

struct Range {
  uintptr_t begin, end;
  bool managed;
};

std::mutex mu;
int init_result = 0;
int devices = 0;
std::vector<int> primary_active;
void* current_context = nullptr;
std::vector<Range> ranges;
std::atomic<int> pointer_queries{0};
std::atomic<int> context_queries{0};
std::atomic<int> context_creations{0};

}  // namespace

extern "C" {

// ---- controls ----
__attribute__((visibility("default"))) void fake_cuda_reset(int device_count, int init_error) {
  std::lock_guard<std::mutex> lock(mu);
  devices = device_count;
  init_result = init_error;
  primary_active.assign(static_cast<size_t>(device_count), 0);
  current_context = nullptr;
  ranges.clear();
  pointer_queries = 0;
  context_queries = 0;
  context_creations = 0;
}
__attribute__((visibility("default"))) void fake_cuda_set_primary_active(int device, int active) {
  std::lock_guard<std::mutex> lock(mu);
  primary_active.at(static_cast<size_t>(device)) = active;
}
__attribute__((visibility("default"))) void fake_cuda_set_current(void* context) {
  std::lock_guard<std::mutex> lock(mu);
  current_context = context;
}
__attribute__((visibility("default"))) void fake_cuda_add_range(const void* p, size_t bytes,
                                                                int managed) {
  std::lock_guard<std::mutex> lock(mu);
  const auto b = reinterpret_cast<uintptr_t>(p);
  ranges.push_back({b, b + bytes, managed != 0});
}
__attribute__((visibility("default"))) int fake_cuda_pointer_queries() { return pointer_queries; }
__attribute__((visibility("default"))) int fake_cuda_context_queries() { return context_queries; }
__attribute__((visibility("default"))) int fake_cuda_context_creations() {
  return context_creations;
}

// ---- the driver API subset (CUresult: 0 success, 100 no device, 101 invalid device) ----
__attribute__((visibility("default"))) int cuInit(unsigned) { return init_result; }
__attribute__((visibility("default"))) int cuDriverGetVersion(int* v) {
  *v = 12040;
  return 0;
}
__attribute__((visibility("default"))) int cuDeviceGetCount(int* n) {
  std::lock_guard<std::mutex> lock(mu);
  if (init_result != 0) return 3;  // CUDA_ERROR_NOT_INITIALIZED
  *n = devices;
  return 0;
}
__attribute__((visibility("default"))) int cuDeviceGet(int* dev, int ordinal) {
  std::lock_guard<std::mutex> lock(mu);
  if (ordinal < 0 || ordinal >= devices) return 101;
  *dev = ordinal;
  return 0;
}
__attribute__((visibility("default"))) int cuDevicePrimaryCtxGetState(int dev, unsigned* flags,
                                                                      int* active) {
  std::lock_guard<std::mutex> lock(mu);
  ++context_queries;
  if (dev < 0 || dev >= devices) return 101;
  *flags = 0;
  *active = primary_active[static_cast<size_t>(dev)];
  return 0;
}
__attribute__((visibility("default"))) int cuCtxGetCurrent(void** ctx) {
  std::lock_guard<std::mutex> lock(mu);
  ++context_queries;
  *ctx = current_context;
  return 0;
}
// attribute 2: CU_POINTER_ATTRIBUTE_MEMORY_TYPE (unsigned int; 2 = device), 8: IS_MANAGED (bool).
__attribute__((visibility("default"))) int cuPointerGetAttributes(unsigned n, unsigned* attrs,
                                                                  void** data, uintptr_t ptr) {
  std::lock_guard<std::mutex> lock(mu);
  ++pointer_queries;
  const Range* hit = nullptr;
  for (const Range& r : ranges) {
    if (ptr >= r.begin && ptr < r.end) hit = &r;
  }
  for (unsigned i = 0; i < n; ++i) {
    if (attrs[i] == 2) {
      const unsigned type = hit == nullptr ? 0 : hit->managed ? 1 : 2;
      std::memcpy(data[i], &type, sizeof(type));
    } else if (attrs[i] == 8) {
      const bool managed = hit != nullptr && hit->managed;
      std::memcpy(data[i], &managed, sizeof(managed));
    }
  }
  return 0;
}
// What must never be called: each would create a context or allocate device memory.
__attribute__((visibility("default"))) int cuDevicePrimaryCtxRetain(void**, int) {
  ++context_creations;
  return 0;
}
__attribute__((visibility("default"))) int cuCtxCreate_v4(void**, void*, unsigned, int) {
  ++context_creations;
  return 0;
}
__attribute__((visibility("default"))) int cuMemAlloc_v2(uintptr_t*, size_t) {
  ++context_creations;
  return 0;
}

}  // extern "C"
