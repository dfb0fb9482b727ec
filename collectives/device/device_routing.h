// Which path a collective takes for the memory kinds of its buffers, and how big the staging
// buffers of the device path grow: the device-free decisions of GPU buffers in collectives
// (docs/RDMA_AND_GPU.md, "GPU buffers in collectives"), pure functions so that they are
// unit-tested on machines without a GPU.
#pragma once

#include <cstddef>
#include <optional>

#include "collectives/dtype.h"
#include "runtime/memory.h"
#include "runtime/status.h"

namespace eagercomm::detail {

enum class DevicePath : uint8_t {
  kHost = 0,    // every buffer is host memory: the ordinary collectives, unchanged
  kStaged = 1,  // a buffer is device memory: staged through pinned host memory (DeviceStaging)
};

// The path of a collective whose send and receive buffers are of kinds `send` and `recv`
// (broadcast: the same kind twice). `op` is the reduction for allreduce, nullopt for the
// collectives that only copy. `kernels` says whether this build has the CUDA reduction kernels.
// Errors (kInvalidArgument, kNotSupported) name the type, the operator or what the build lacks.
Result<DevicePath> choose_device_path(const char* what, MemoryKind send, MemoryKind recv,
                                      DataType type, std::optional<ReduceOp> op, bool kernels);

// The smallest unit staging buffers are allocated in: pinned and device allocations are slow
// (milliseconds), so small growths are rounded up to it.
inline constexpr size_t kStagingGranule = size_t{1} << 16;

// The capacity to hold once `needed` bytes are asked of a buffer holding `current`: `current`
// while it suffices (no reallocation), else at least twice `current` (a run of growing calls
// reallocates O(log n) times), rounded up to kStagingGranule. 0 for 0 bytes needed.
size_t staging_capacity(size_t current, size_t needed);

}  // namespace eagercomm::detail
