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

}  // namespace eagercomm
