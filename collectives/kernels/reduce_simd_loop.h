// The one SIMD loop of the reduction kernels, for every x86 instruction set: reduce_avx2.cc and
// reduce_avx512.cc each describe their registers ("lanes": load, widen, operate, narrow, store),
// define EC_SIMD_TARGET as their target attribute and include this header, so the loops carry the
// same target as the lanes they call. They must: a vector passed to or returned from a function
// of the default target travels in memory (the -mavx ABI differs), so a loop of the default
// target calling a lane of the AVX-512 target reads its arguments from the wrong registers once
// the call is not inlined (the sanitizer builds do not inline it). The loops sit in an unnamed
// namespace: each including file compiles its own copy for its own target. Internal.
#pragma once

#if defined(__x86_64__)

#ifndef EC_SIMD_TARGET
#error "define EC_SIMD_TARGET (the including file's target attribute) before this header"
#endif

#include <concepts>
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "collectives/kernels/reduce_scalar.h"

// For the lanes of reduce_avx2.cc and reduce_avx512.cc. GCC 12's AVX-512 intrinsics start from
// _mm512_undefined_*(), which trips a false -Wmaybe-uninitialized once inlined (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

namespace eagercomm::reduce_impl {
namespace {

template <class L, class Op>
EC_SIMD_TARGET inline typename L::V simd_apply(typename L::V a, typename L::V b) {
  if constexpr (std::is_same_v<Op, Sum>) {
    return L::sum(a, b);
  } else if constexpr (std::is_same_v<Op, Min>) {
    return L::min(a, b);
  } else {
    return L::max(a, b);
  }
}

// Lanes that can load and store the first `rem` elements only (AVX-512's masks) finish with one
// masked vector; the others finish with the scalar loop.
template <class L, class S>
concept MaskedTail = requires(const S* in, S* out, typename L::Packed v, size_t rem) {
  L::load(in, rem);
  L::store(out, v, rem);
};

// out1[i] (and out2[i] when kTwo) = Op(a[i], b[i]). Two vectors per iteration: both inputs are
// loaded before any store (so out may equal a or b), and there is enough independent work to
// hide the conversion latency of the 16-bit types.
template <class E, class L, class Op, bool kTwo>
EC_SIMD_TARGET inline void simd_reduce_loop(void* out1, void* out2, const void* a, const void* b,
                                            size_t n) {
  using S = typename Element<E>::Storage;
  auto* o1 = static_cast<S*>(out1);
  auto* o2 = static_cast<S*>(out2);
  const auto* pa = static_cast<const S*>(a);
  const auto* pb = static_cast<const S*>(b);
  size_t i = 0;
  for (; i + 2 * L::kLanes <= n; i += 2 * L::kLanes) {
    const typename L::V a0 = L::load(pa + i);
    const typename L::V b0 = L::load(pb + i);
    const typename L::V a1 = L::load(pa + i + L::kLanes);
    const typename L::V b1 = L::load(pb + i + L::kLanes);
    const typename L::Packed r0 = L::pack(simd_apply<L, Op>(a0, b0));
    const typename L::Packed r1 = L::pack(simd_apply<L, Op>(a1, b1));
    L::store(o1 + i, r0);
    L::store(o1 + i + L::kLanes, r1);
    if constexpr (kTwo) {
      L::store(o2 + i, r0);
      L::store(o2 + i + L::kLanes, r1);
    }
  }
  if (i + L::kLanes <= n) {
    const typename L::Packed r = L::pack(simd_apply<L, Op>(L::load(pa + i), L::load(pb + i)));
    L::store(o1 + i, r);
    if constexpr (kTwo) L::store(o2 + i, r);
    i += L::kLanes;
  }
  if constexpr (MaskedTail<L, S>) {
    if (i < n) {
      const size_t rem = n - i;
      const typename L::Packed r =
          L::pack(simd_apply<L, Op>(L::load(pa + i, rem), L::load(pb + i, rem)));
      L::store(o1 + i, r, rem);
      if constexpr (kTwo) L::store(o2 + i, r, rem);
    }
  } else {
    scalar_loop<E, Op, kTwo>(o1 + i, kTwo ? o2 + i : nullptr, pa + i, pb + i, n - i);
  }
}

// out1 = out2 = in, four registers per iteration so `in` is read once. `B` moves one register
// of bytes (B::kBytes); with a masked tail (B::load(p, rem) / B::store(p, v, rem)) the last
// partial register is moved masked, otherwise by memcpy.
template <class B>
EC_SIMD_TARGET inline void simd_copy2_loop(void* out1, void* out2, const void* in, size_t bytes) {
  auto* o1 = static_cast<unsigned char*>(out1);
  auto* o2 = static_cast<unsigned char*>(out2);
  const auto* src = static_cast<const unsigned char*>(in);
  constexpr size_t kStep = 4 * B::kBytes;
  size_t i = 0;
  for (; i + kStep <= bytes; i += kStep) {
    const typename B::V v0 = B::load(src + i);
    const typename B::V v1 = B::load(src + i + B::kBytes);
    const typename B::V v2 = B::load(src + i + 2 * B::kBytes);
    const typename B::V v3 = B::load(src + i + 3 * B::kBytes);
    B::store(o1 + i, v0);
    B::store(o1 + i + B::kBytes, v1);
    B::store(o1 + i + 2 * B::kBytes, v2);
    B::store(o1 + i + 3 * B::kBytes, v3);
    B::store(o2 + i, v0);
    B::store(o2 + i + B::kBytes, v1);
    B::store(o2 + i + 2 * B::kBytes, v2);
    B::store(o2 + i + 3 * B::kBytes, v3);
  }
  if constexpr (requires(typename B::V v, size_t rem) {
                  B::load(src, rem);
                  B::store(o1, v, rem);
                }) {
    for (; i < bytes; i += B::kBytes) {
      const size_t rem = bytes - i < B::kBytes ? bytes - i : B::kBytes;
      const typename B::V v = B::load(src + i, rem);
      B::store(o1 + i, v, rem);
      B::store(o2 + i, v, rem);
    }
  } else if (i < bytes) {  // memcpy wants non-null pointers even for zero bytes
    std::memcpy(o1 + i, src + i, bytes - i);
    std::memcpy(o2 + i, src + i, bytes - i);
  }
}

}  // namespace
}  // namespace eagercomm::reduce_impl

#endif  // defined(__x86_64__)
