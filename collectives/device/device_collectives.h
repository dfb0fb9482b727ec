// GPU buffers in collectives (issue #6 item 3; docs/RDMA_AND_GPU.md, "GPU buffers in
// collectives"): allreduce, broadcast and allgather of MemoryKind::kCuda buffers, staged through
// pinned host memory around the ordinary host collectives, with the reductions done by the CUDA
// kernels (collectives/cuda/cuda_reduce.h) on a stream this object owns.
//
// allreduce: send is copied to pinned memory, the contributions are allgathered (host
// allgather), copied to device scratch and reduced there in rank order, block 0 op block 1 op
// ... op block P-1: every rank runs the same kernels on the same inputs in the same order, so
// every rank's result is identical bit for bit. broadcast and allgather only copy.
//
// One per communicator, made on the first device buffer (a host-only program never makes one,
// and never touches the CUDA runtime). Compiled in every build: without CUDA, create() fails with
// kUnavailable, which is not reached: a device buffer is refused before (gpu::check_usable).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>

#include "collectives/dtype.h"
#include "runtime/gpu.h"
#include "runtime/status.h"

namespace eagercomm::detail {

// The host collectives the device path runs on its staging buffers. `local_error`, when not
// Ok, is this rank's failure before the collective: the call then fails on every rank with it
// (the peers do not wait for a contribution that never comes).
class HostCollectives {
 public:
  virtual ~HostCollectives() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Status allgather(const void* send, void* recv, size_t count, DataType type,
                           const Status& local_error) = 0;
  virtual Status broadcast(void* buf, size_t count, DataType type, int root,
                           const Status& local_error) = 0;
};

class DeviceStaging {
 public:
  // The stream, on `device`; the buffers come on first use. kUnavailable without a GPU.
  static Result<std::unique_ptr<DeviceStaging>> create(int device);

  // Any of the buffers may be device or host memory (cudaMemcpyDefault copies either way); the
  // device ones must be memory of this object's device (else the call fails on every rank with
  // kInvalidArgument naming both devices). `user_stream` (a cudaStream_t; null: the legacy
  // default stream) is the caller's: the buffers are read after the work enqueued there before
  // the call. Everything runs with this object's device current, the caller's restored after.
  // Every call returns with nothing of its own in flight, failed or not: results complete, and
  // no copy or kernel left reading or writing the caller's buffers. Calls are serialised: the
  // staging buffers are shared.
  Status allreduce(HostCollectives& host, const void* send, void* recv, size_t count, DataType type,
                   ReduceOp op, void* user_stream);
  Status broadcast(HostCollectives& host, void* buf, size_t count, DataType type, int root,
                   void* user_stream);
  Status allgather(HostCollectives& host, const void* send, void* recv, size_t count, DataType type,
                   void* user_stream);

 private:
  explicit DeviceStaging(gpu::Stream stream) : stream_(std::move(stream)) {}
  // Ok when every device buffer among `a` and `b` is memory of this object's device.
  Status check_device(const char* what, const void* a, const void* b) const;
  // Grows (see staging_capacity) and returns the buffer's memory, null for 0 bytes.
  Result<void*> pinned(gpu::PinnedBuffer& buf, size_t bytes);
  Result<void*> device(gpu::DeviceBuffer& buf, size_t bytes);
  // Copies on the stream, after the work on `user_stream`, and waits for it.
  Status copy_sync(void* dst, const void* src, size_t bytes, void* user_stream);
  // Copies `send` (count elements) into pinned memory and allgathers every rank's copy; a local
  // failure before that (`local`, or one of its own) fails the allgather on every rank. The
  // gathered blocks, `*bytes` each.
  Result<void*> gather_staged(HostCollectives& host, const char* what, const void* send,
                              size_t count, DataType type, void* user_stream, Status local,
                              size_t* bytes);

  std::mutex mu_;
  gpu::Stream stream_;
  gpu::PinnedBuffer send_;      // this rank's contribution (allreduce, allgather, broadcast)
  gpu::PinnedBuffer gathered_;  // every rank's contribution, rank order
  gpu::DeviceBuffer scratch_;  // the gathered blocks on the device, then the result if recv is host
};

// Whether `p` is CUDA device memory (gpu::detected_kind: no context is created).
inline bool is_device_pointer(const void* p) { return gpu::detected_kind(p) == MemoryKind::kCuda; }

}  // namespace eagercomm::detail
