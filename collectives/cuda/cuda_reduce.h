// Element-wise reductions of GPU buffers (issue #6: GPU buffers end to end), the device twin of
// collectives/reduce_kernels.h: out[i] = a[i] op b[i] for every DataType and ReduceOp, in a
// kernel on a caller-given stream (the engine's, once the collectives take MemoryKind::kCuda).
// Built for sm_80 and sm_90 when the CUDA toolkit is found; this header needs no CUDA headers,
// so callers compile everywhere.
//
// Half-precision types (f16, bf16) are reduced in f32 and rounded once, like the CPU kernels.
// min / max of NaN follow fminf / fmaxf (the other operand wins), as on the CPU.
#pragma once

#include <cstddef>

#include "collectives/dtype.h"
#include "runtime/status.h"

namespace eagercomm::cuda {

// Whether reduce() exists in this build (EAGERCOMM_HAVE_CUDA).
bool reduce_built();

// Enqueues out = a op b (count elements; out may alias a or b) on `stream` (a cudaStream_t, or
// null for the legacy default stream). Returns once enqueued: synchronize the stream before
// reading `out`. All three pointers must be device memory of the current device.
// Errors: kNotSupported in builds without CUDA, kUnavailable without a GPU, kInternal when the
// launch fails (the message carries CUDA's error string).
Status reduce(DataType type, ReduceOp op, void* out, const void* a, const void* b, size_t count,
              void* stream);

}  // namespace eagercomm::cuda
