// The CUDA driver (libcuda.so.1) loaded at run time, for the one question every collective asks:
// is this pointer device memory? (issue 19, "no CUDA for host programs").
//
// The runtime API's cudaPointerGetAttributes creates a primary context on GPU 0 (~0.5 GB of
// device memory per process) and costs two driver calls per collective, so a host-only program
// on a GPU machine paid both. This module asks the driver directly, never creates a context and,
// while the process has no context at all (no device memory can exist then), asks nothing about
// pointers. It is compiled into every build, with or without the CUDA toolkit: a build without
// CUDA still recognises device pointers on a GPU machine and refuses them instead of handing them
// to the host path (which would fault). Like NCCL's cudawrap, nothing links libcuda.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "runtime/memory.h"
#include "runtime/status.h"

namespace eagercomm::gpu {

class CudaDriver {
 public:
  // Loads `library` (a path or a name for dlopen) and calls cuInit(0), which loads the driver but
  // creates no context. kUnavailable when the library is absent (no NVIDIA driver: the normal case
  // on hosts without a GPU), kNotSupported when it lacks an entry point used here.
  static Result<std::unique_ptr<CudaDriver>> load(const std::string& library);
  ~CudaDriver();
  CudaDriver(const CudaDriver&) = delete;
  CudaDriver& operator=(const CudaDriver&) = delete;

  // kCuda for device or managed memory of any context of this process, kHost otherwise (host,
  // pinned-host and unknown pointers alike). Creates no context. While no context exists, answers
  // kHost without asking about the pointer; once one has been seen, one driver call per pointer.
  // Thread-safe.
  MemoryKind classify(const void* p);

  // Whether a context exists that device memory could belong to: the calling thread's current
  // context, or an active primary context of any device (the runtime API and PyTorch use those).
  // Latches: once true, stays true. Contexts created with cuCtxCreate that are current on no
  // thread are not seen; their memory reads as host memory until a context is seen.
  bool any_context();

  int driver_version() const { return driver_version_; }
  int device_count() const { return device_count_; }
  const std::string& library() const { return library_; }

 private:
  struct Api;
  CudaDriver(void* handle, std::unique_ptr<Api> api, std::string library);

  void* handle_ = nullptr;  // dlopen's
  std::unique_ptr<Api> api_;
  std::string library_;
  int driver_version_ = 0;
  int device_count_ = 0;
  std::atomic<bool> context_seen_{false};
};

// The process's driver, chosen by EAGERCOMM_CUDA (off: none, never loaded) and
// EAGERCOMM_CUDA_DRIVER (which library), loaded once on first use; null when off, when the
// library is absent or when the environment is bad (logged once, with the reason).
CudaDriver* process_driver();

// Why process_driver() is null ("" when it is not): for error messages and eagercomm-info.
const std::string& process_driver_reason();

}  // namespace eagercomm::gpu
