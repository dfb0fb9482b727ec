#include "collectives/device/device_routing.h"

#include <cstdint>
#include <string>

namespace eagercomm::detail {

Result<DevicePath> choose_device_path(const char* what, MemoryKind send, MemoryKind recv,
                                      DataType type, std::optional<ReduceOp> op, bool kernels) {
  if (send == MemoryKind::kHost && recv == MemoryKind::kHost) return DevicePath::kHost;
  // From here on a buffer is device memory. The host path validates its own arguments (and
  // tells the peers); the device path checks what it relies on before staging anything.
  if (!is_valid_dtype(static_cast<uint32_t>(type))) {
    return make_status(StatusCode::kInvalidArgument,
                       "%s of CUDA buffers: data type %u is not a DataType", what,
                       static_cast<unsigned>(type));
  }
  if (op.has_value()) {
    if (!is_valid_reduce_op(static_cast<uint32_t>(*op))) {
      return make_status(StatusCode::kInvalidArgument,
                         "%s of CUDA buffers: reduction operator %u is not a ReduceOp", what,
                         static_cast<unsigned>(*op));
    }
    // collectives/cuda/cuda_reduce.h has a kernel for every DataType x ReduceOp; only a build
    // without CUDA lacks them (and then no pointer can be device memory).
    if (!kernels) {
      return make_status(StatusCode::kNotSupported,
                         "%s of CUDA buffers (%s): this build has no CUDA reduction kernels", what,
                         std::string(dtype_name(type)).c_str());
    }
  }
  return DevicePath::kStaged;
}

size_t staging_capacity(size_t current, size_t needed) {
  if (needed <= current) return current;
  size_t want = needed;
  if (current <= SIZE_MAX / 2 && current * 2 > want) want = current * 2;
  if (want > SIZE_MAX - (kStagingGranule - 1)) return want;  // cannot round: the exact size
  return (want + kStagingGranule - 1) / kStagingGranule * kStagingGranule;
}

}  // namespace eagercomm::detail
