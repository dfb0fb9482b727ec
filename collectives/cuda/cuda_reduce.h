// Element-wise reductions of GPU buffers (issue #6: GPU buffers end to end), the device twin of
// collectives/kernels/reduce_kernels.h: out[i] = a[i] op b[i] for every DataType and ReduceOp, in a
// kernel on a caller-given stream (the engine's, once the collectives take MemoryKind::kCuda).
// Built for sm_80 and sm_90 when the CUDA toolkit is found; this header needs no CUDA headers,
// so callers compile everywhere.
//
// Half-precision types (f16, bf16) are reduced in f32 and rounded once, like the CPU kernels.
// min / max of NaN follow fminf / fmaxf (the other operand wins), as on the CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "collectives/dtype.h"
#include "runtime/status.h"

namespace eagercomm::cuda {

// Whether reduce() exists in this build (EAGERCOMM_HAVE_CUDA).
bool reduce_built();

// Ok when the kernels may read or write `p` as elements of `type`: aligned to the element's
// width. A misaligned access in a kernel is a sticky error that ends the process's CUDA context,
// so reduce() refuses such a pointer first (kInvalidArgument naming `what`). Pure: no CUDA call.
inline Status check_alignment(const char* what, DataType type, const void* p) {
  const size_t width = dtype_size(type);
  if (reinterpret_cast<uintptr_t>(p) % width == 0) return Status::Ok();
  const std::string_view name = dtype_name(type);
  return make_status(StatusCode::kInvalidArgument,
                     "%s: the device buffer at %p is not aligned to its %zu-byte elements (%.*s); "
                     "CUDA kernels cannot use it",
                     what, p, width, static_cast<int>(name.size()), name.data());
}

// Enqueues out = a op b (count elements; out may alias a or b) on `stream` (a cudaStream_t, or
// null for the legacy default stream). Returns once enqueued: synchronize the stream before
// reading `out`. All three pointers must be device memory of the current device.
// Errors: kNotSupported in builds without CUDA, kInvalidArgument for a null or misaligned
// pointer (check_alignment), kUnavailable without a GPU, kInternal when the launch fails (the
// message carries CUDA's error string: this launch's own, never an earlier call's left-over).
Status reduce(DataType type, ReduceOp op, void* out, const void* a, const void* b, size_t count,
              void* stream);

}  // namespace eagercomm::cuda
