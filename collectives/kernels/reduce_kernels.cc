// Dispatch of the reduction kernels: the instruction set is probed once and its table
// (reduce_table.h) serves every call. The portable path is here; the vector paths are in
// reduce_avx2.cc and reduce_avx512.cc, built from one SIMD loop (reduce_simd_loop.h).
#include "collectives/kernels/reduce_kernels.h"

#include <cstring>

#include "collectives/kernels/reduce_table.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace eagercomm {
namespace {

using reduce_impl::Element;
using reduce_impl::KernelFn;
using reduce_impl::KernelTable;
using reduce_impl::kNumOps;
using reduce_impl::kNumTypes;
using reduce_impl::make_table;
using reduce_impl::scalar_loop;

// ------------------------------------------------------------------------------------------------
// Portable path.

struct GenericFamily {
  template <class E, class Op, bool kTwo>
  static void run(void* out1, void* out2, const void* a, const void* b, size_t n) {
    using S = typename Element<E>::Storage;
    scalar_loop<E, Op, kTwo>(static_cast<S*>(out1), static_cast<S*>(out2), static_cast<const S*>(a),
                             static_cast<const S*>(b), n);
  }

  // Block by block, so the second memcpy reads `in` from L1 instead of from memory.
  static void copy2(void* out1, void* out2, const void* in, size_t bytes) {
    constexpr size_t kBlock = 8192;
    auto* o1 = static_cast<unsigned char*>(out1);
    auto* o2 = static_cast<unsigned char*>(out2);
    const auto* src = static_cast<const unsigned char*>(in);
    for (size_t done = 0; done < bytes; done += kBlock) {
      const size_t len = bytes - done < kBlock ? bytes - done : kBlock;
      std::memcpy(o1 + done, src + done, len);
      std::memcpy(o2 + done, src + done, len);
    }
  }
};

constexpr KernelTable kGenericTable = make_table<GenericFamily>("generic");

#if defined(__x86_64__)
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
#endif

// What the CPU and OS support, probed once: CPUID traps to the hypervisor in a VM, far too slow
// to run per call.
struct CpuSupport {
  bool avx2 = false;
  bool avx512 = false;
};

CpuSupport probe_cpu() {
  CpuSupport support;
#if defined(__x86_64__)
  // __builtin_cpu_supports also checks that the OS saves the vector registers (XCR0).
  __builtin_cpu_init();
  support.avx2 = __builtin_cpu_supports("avx2") && cpu_has_f16c();
  support.avx512 = support.avx2 && __builtin_cpu_supports("avx512f") &&
                   __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512dq");
#endif
  return support;
}

bool isa_available(detail::KernelIsa isa) {
  static const CpuSupport support = probe_cpu();
  switch (isa) {
    case detail::KernelIsa::kGeneric:
      return true;
    case detail::KernelIsa::kAvx2:
      return support.avx2;
    case detail::KernelIsa::kAvx512:
      return support.avx512;
  }
  return false;
}

detail::KernelIsa best_isa() {
  if (isa_available(detail::KernelIsa::kAvx512)) return detail::KernelIsa::kAvx512;
  if (isa_available(detail::KernelIsa::kAvx2)) return detail::KernelIsa::kAvx2;
  return detail::KernelIsa::kGeneric;
}

// The table of `isa`, or the generic one where `isa` is not available.
const KernelTable& table_for(detail::KernelIsa isa) {
#if defined(__x86_64__)
  if (isa == detail::KernelIsa::kAvx512 && isa_available(isa)) return reduce_impl::avx512_table();
  if (isa == detail::KernelIsa::kAvx2 && isa_available(isa)) return reduce_impl::avx2_table();
#endif
  (void)isa;
  return kGenericTable;
}

// Picked once: after the first call this is one guard load per call.
const KernelTable& dispatched_table() {
  static const KernelTable& table = table_for(best_isa());
  return table;
}

// The kernel for (type, op), or null for values outside the enumerations.
KernelFn pick(const std::array<std::array<KernelFn, kNumOps>, kNumTypes>& grid, DataType type,
              ReduceOp op) {
  const auto t = static_cast<size_t>(type);
  const auto o = static_cast<size_t>(op);
  if (t >= kNumTypes || o >= kNumOps) return nullptr;
  return grid[t][o];
}

void run_reduce(const KernelTable& table, DataType type, ReduceOp op, void* out, const void* a,
                const void* b, size_t count) {
  if (KernelFn fn = pick(table.reduce1, type, op)) fn(out, nullptr, a, b, count);
}

void run_reduce2(const KernelTable& table, DataType type, ReduceOp op, void* out1, void* out2,
                 const void* a, const void* b, size_t count) {
  if (KernelFn fn = pick(table.reduce2, type, op)) fn(out1, out2, a, b, count);
}

}  // namespace

void reduce(DataType type, ReduceOp op, void* out, const void* a, const void* b, size_t count) {
  run_reduce(dispatched_table(), type, op, out, a, b, count);
}

void reduce2(DataType type, ReduceOp op, void* out1, void* out2, const void* a, const void* b,
             size_t count) {
  run_reduce2(dispatched_table(), type, op, out1, out2, a, b, count);
}

void copy2(void* out1, void* out2, const void* in, size_t bytes) {
  dispatched_table().copy2(out1, out2, in, bytes);
}

const char* reduce_kernels_isa() { return dispatched_table().name; }

namespace detail {

bool kernel_isa_available(KernelIsa isa) { return isa_available(isa); }

const char* kernel_isa_name(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kGeneric:
      return "generic";
    case KernelIsa::kAvx2:
      return "avx2";
    case KernelIsa::kAvx512:
      return "avx512";
  }
  return "?";
}

KernelIsa dispatched_kernel_isa() {
  static const KernelIsa isa = best_isa();
  return isa;
}

void reduce_with_isa(KernelIsa isa, DataType type, ReduceOp op, void* out, const void* a,
                     const void* b, size_t count) {
  run_reduce(table_for(isa), type, op, out, a, b, count);
}

void reduce2_with_isa(KernelIsa isa, DataType type, ReduceOp op, void* out1, void* out2,
                      const void* a, const void* b, size_t count) {
  run_reduce2(table_for(isa), type, op, out1, out2, a, b, count);
}

void copy2_with_isa(KernelIsa isa, void* out1, void* out2, const void* in, size_t bytes) {
  table_for(isa).copy2(out1, out2, in, bytes);
}

}  // namespace detail
}  // namespace eagercomm
