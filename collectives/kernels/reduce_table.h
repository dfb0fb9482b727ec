// A kernel table: the reduce / reduce2 / copy2 functions of one instruction set, indexed by
// (DataType, ReduceOp). reduce_kernels.cc picks one table per process; reduce_avx2.cc and
// reduce_avx512.cc build theirs from one SIMD loop (reduce_simd_loop.h). Internal.
#pragma once

#include <array>
#include <cstddef>

#include "collectives/dtype.h"
#include "collectives/kernels/reduce_scalar.h"

namespace eagercomm::reduce_impl {

// The tables below are indexed by the enumerators' values.
static_assert(static_cast<int>(DataType::kFloat32) == 0 &&
              static_cast<int>(DataType::kFloat64) == 1 &&
              static_cast<int>(DataType::kFloat16) == 2 &&
              static_cast<int>(DataType::kBFloat16) == 3 &&
              static_cast<int>(DataType::kInt32) == 4 && static_cast<int>(DataType::kInt64) == 5);
static_assert(static_cast<int>(ReduceOp::kSum) == 0 && static_cast<int>(ReduceOp::kMin) == 1 &&
              static_cast<int>(ReduceOp::kMax) == 2);
constexpr size_t kNumTypes = 6;
constexpr size_t kNumOps = 3;

// One kernel: out2 is ignored unless it is a reduce2 kernel.
using KernelFn = void (*)(void* out1, void* out2, const void* a, const void* b, size_t n);
using Copy2Fn = void (*)(void* out1, void* out2, const void* in, size_t bytes);

struct KernelTable {
  const char* name;
  std::array<std::array<KernelFn, kNumOps>, kNumTypes> reduce1;
  std::array<std::array<KernelFn, kNumOps>, kNumTypes> reduce2;
  Copy2Fn copy2;
};

// A Family provides `template <class E, class Op, bool kTwo> static void run(...)` (a KernelFn)
// and `static void copy2(...)` for one instruction set.
template <class Family, class E, bool kTwo>
constexpr std::array<KernelFn, kNumOps> kernel_row() {
  return {&Family::template run<E, Sum, kTwo>, &Family::template run<E, Min, kTwo>,
          &Family::template run<E, Max, kTwo>};
}

template <class Family, bool kTwo>
constexpr std::array<std::array<KernelFn, kNumOps>, kNumTypes> kernel_grid() {
  return {kernel_row<Family, float, kTwo>(),   kernel_row<Family, double, kTwo>(),
          kernel_row<Family, F16, kTwo>(),     kernel_row<Family, BF16, kTwo>(),
          kernel_row<Family, int32_t, kTwo>(), kernel_row<Family, int64_t, kTwo>()};
}

template <class Family>
constexpr KernelTable make_table(const char* name) {
  return {name, kernel_grid<Family, false>(), kernel_grid<Family, true>(), &Family::copy2};
}

#if defined(__x86_64__)
// Defined in reduce_avx2.cc and reduce_avx512.cc; the caller checks that the CPU can run them.
const KernelTable& avx2_table();
const KernelTable& avx512_table();
#endif

}  // namespace eagercomm::reduce_impl
