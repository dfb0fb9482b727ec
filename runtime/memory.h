// Kinds of memory a buffer can live in. Every registration and allocation names one, so that a
// backend can pick the right registration call (ibv_reg_mr vs dma-buf, UCS_MEMORY_TYPE_CUDA)
// and refuse what it cannot reach instead of faulting.
#pragma once

#include <cstdint>
#include <string_view>

namespace eagercomm {

enum class MemoryKind : uint8_t {
  kHost = 0,  // ordinary process memory
  kCuda = 1,  // device memory of the current CUDA device (reserved: needs a CUDA build)
};

inline std::string_view memory_kind_name(MemoryKind kind) {
  return kind == MemoryKind::kHost ? "host" : "cuda";
}

// The CUDA stream a call on device buffers is ordered on (NCCL's convention): the call reads its
// inputs after the work enqueued on `handle` before the call, and its results are complete when
// it returns (blocking forms) or when its request completes. `handle` is a cudaStream_t; null,
// the default, is the legacy default stream of the buffers' device (pass cudaStreamPerThread
// itself for that stream). Ignored when every buffer is host memory.
struct CudaStream {
  void* handle = nullptr;
};

}  // namespace eagercomm
