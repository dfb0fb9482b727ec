// The reduction kernels' scalar semantics: the portable path, the vector paths' tails, and the
// definition every vector path must match bit for bit (reduce_kernels.h states them). Internal
// to the kernels (reduce_kernels.cc, reduce_avx2.cc, reduce_avx512.cc).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "collectives/kernels/half.h"

namespace eagercomm::reduce_impl {

// Operator tags.
struct Sum {};
struct Min {};
struct Max {};

// Element tags for the two 16-bit float formats (stored as uint16_t).
struct F16 {};
struct BF16 {};

// ------------------------------------------------------------------------------------------------
// Scalar semantics: the portable path, the vector paths' tails, and the definition every vector
// path must match bit for bit.

template <class F>
using FloatBits = std::conditional_t<sizeof(F) == 4, uint32_t, uint64_t>;

template <class F>
constexpr F canonical_nan() {
  if constexpr (sizeof(F) == 4) {
    return std::bit_cast<F>(uint32_t{0x7FC00000u});
  } else {
    return std::bit_cast<F>(uint64_t{0x7FF8000000000000u});
  }
}

template <class Op, class F>
inline F float_apply(F a, F b) {
  if constexpr (std::is_same_v<Op, Sum>) {
    const F r = a + b;
    // x86 propagates the first NaN operand (and makes a negative NaN for inf - inf), ARM makes
    // the default NaN: one canonical NaN keeps replicas identical whatever the order or machine.
    return r != r ? canonical_nan<F>() : r;
  } else {
    if (a != a || b != b) return canonical_nan<F>();
    if (a == b) {
      // Equal values have equal bits, except -0 == +0: OR picks -0 (min), AND picks +0 (max),
      // whichever side it came from.
      const FloatBits<F> x = std::bit_cast<FloatBits<F>>(a);
      const FloatBits<F> y = std::bit_cast<FloatBits<F>>(b);
      return std::bit_cast<F>(std::is_same_v<Op, Min> ? (x | y) : (x & y));
    }
    if constexpr (std::is_same_v<Op, Min>) {
      return a < b ? a : b;
    } else {
      return a > b ? a : b;
    }
  }
}

template <class Op, class I>
inline I int_apply(I a, I b) {
  if constexpr (std::is_same_v<Op, Sum>) {
    using U = std::make_unsigned_t<I>;  // wraps without signed-overflow UB
    return static_cast<I>(static_cast<U>(a) + static_cast<U>(b));
  } else if constexpr (std::is_same_v<Op, Min>) {
    return a < b ? a : b;
  } else {
    return a > b ? a : b;
  }
}

// Storage type and scalar operator of each element type.
template <class E>
struct Element {
  using Storage = E;
  template <class Op>
  static E apply(E a, E b) {
    if constexpr (std::is_floating_point_v<E>) {
      return float_apply<Op>(a, b);
    } else {
      return int_apply<Op>(a, b);
    }
  }
};

template <>
struct Element<F16> {
  using Storage = uint16_t;
  template <class Op>
  static uint16_t apply(uint16_t a, uint16_t b) {
    return float_to_half(float_apply<Op>(half_to_float(a), half_to_float(b)));
  }
};

template <>
struct Element<BF16> {
  using Storage = uint16_t;
  template <class Op>
  static uint16_t apply(uint16_t a, uint16_t b) {
    return float_to_bf16(float_apply<Op>(bf16_to_float(a), bf16_to_float(b)));
  }
};

// Element-wise loop over Storage pointers. Each element is loaded before anything is stored, so
// out == a or out == b is fine.
template <class E, class Op, bool kTwo>
inline void scalar_loop(typename Element<E>::Storage* out1, typename Element<E>::Storage* out2,
                        const typename Element<E>::Storage* a,
                        const typename Element<E>::Storage* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const auto r = Element<E>::template apply<Op>(a[i], b[i]);
    out1[i] = r;
    if constexpr (kTwo) out2[i] = r;
  }
}

}  // namespace eagercomm::reduce_impl
