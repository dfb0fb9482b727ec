// Element-wise reduction kernels: the inner loop of every reducing collective.
//
// A ring step reads a received chunk and the local chunk, reduces them, and stores the result
// once (reduce) or to two places at once (reduce2: the local output and the next peer's mapped
// buffer), reading the inputs only once. The kernels run near memory bandwidth: the instruction
// set is chosen once, at the first call, from what the CPU supports (AVX-512, AVX2 + F16C, or a
// portable path), and every path gives bit-identical results.
//
// Semantics, identical on every path and every machine:
// - Floating-point sum: one IEEE addition in the element type, rounding to nearest even (f16 and
//   bf16: both inputs are widened to float, added, and rounded back to nearest even). A NaN
//   result is always the canonical quiet NaN of the type (see below), so sum is commutative bit
//   for bit even when NaNs are involved.
// - Integer sum wraps modulo 2^N.
// - min / max are commutative bit for bit, because different ranks compute op(a, b) and
//   op(b, a) and the replicas must stay identical: if either input is NaN the result is the
//   canonical quiet NaN of the type (positive sign, only the quiet bit set: f32 0x7FC00000,
//   f64 0x7FF8000000000000, f16 0x7E00, bf16 0x7FC0); min(-0, +0) = -0 and max(-0, +0) = +0
//   whatever the order.
// - Subnormals are computed exactly, provided the calling thread has not enabled flush-to-zero /
//   denormals-are-zero in its floating-point environment (the default).
//
// Preconditions: every pointer is aligned to the element size and addresses `count` elements
// (any pointer may be null when count == 0). A `type` or `op` outside its enumeration (check
// bytes from peers with is_valid_dtype / is_valid_reduce_op first) writes nothing.
//
// Thread safety: all functions are safe to call concurrently from any thread; they touch only
// the memory passed to them. The first call picks the instruction set (a thread-safe static).
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/dtype.h"

namespace eagercomm {

// out[i] = op(a[i], b[i]) for i < count. `out` may be exactly equal to `a` or `b` (in place),
// never partially overlapping. Pointers need not be aligned beyond the element size.
void reduce(DataType type, ReduceOp op, void* out, const void* a, const void* b, size_t count);

// Same, storing every result to both out1 and out2 (either may equal a or b; out1 != out2; no
// partial overlaps).
void reduce2(DataType type, ReduceOp op, void* out1, void* out2, const void* a, const void* b,
             size_t count);

// out1 = out2 = in (bytes), reading `in` once. The three ranges must not overlap.
void copy2(void* out1, void* out2, const void* in, size_t bytes);

// Name of the instruction set the kernels dispatched to at run time ("avx512", "avx2",
// "generic").
const char* reduce_kernels_isa();

namespace detail {

// The instruction sets the kernels are built for. Tests and benchmarks use these to run one
// specific path (for instance to check that every path matches the portable one bit for bit).
enum class KernelIsa : uint8_t { kGeneric, kAvx2, kAvx512 };

// True when this build has the path and this CPU (and OS) can run it. kGeneric always is.
bool kernel_isa_available(KernelIsa isa);

// "generic", "avx2", "avx512".
const char* kernel_isa_name(KernelIsa isa);

// The instruction set reduce / reduce2 / copy2 dispatch to (the best available one).
KernelIsa dispatched_kernel_isa();

// reduce / reduce2 / copy2 on one specific path; an unavailable `isa` runs the generic path.
void reduce_with_isa(KernelIsa isa, DataType type, ReduceOp op, void* out, const void* a,
                     const void* b, size_t count);
void reduce2_with_isa(KernelIsa isa, DataType type, ReduceOp op, void* out1, void* out2,
                      const void* a, const void* b, size_t count);
void copy2_with_isa(KernelIsa isa, void* out1, void* out2, const void* in, size_t bytes);

}  // namespace detail
}  // namespace eagercomm
