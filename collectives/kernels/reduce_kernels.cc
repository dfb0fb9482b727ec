#include "collectives/kernels/reduce_kernels.h"

#include <array>
#include <bit>
#include <cstring>
#include <type_traits>

#include "collectives/kernels/half.h"

#if defined(__x86_64__)
#include <cpuid.h>
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which trips a false
// -Wmaybe-uninitialized once inlined (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

namespace eagercomm {
namespace {

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
// ------------------------------------------------------------------------------------------------
// x86-64 vector paths. Each "lanes" struct loads a vector of elements widened to the type the
// operator works in (16-bit floats become float), applies sum/min/max with exactly the scalar
// semantics above, and narrows/stores the result. Loads and stores are unaligned.

#define EC_TARGET_AVX2 __attribute__((target("avx,avx2,f16c")))
#define EC_TARGET_AVX512 __attribute__((target("avx,avx2,f16c,avx512f,avx512vl,avx512bw,avx512dq")))

namespace avx2 {

struct F32Ops {
  using V = __m256;
  EC_TARGET_AVX2 static V nan_if_unordered(V r, V x, V y) {
    return _mm256_blendv_ps(r, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000)),
                            _mm256_cmp_ps(x, y, _CMP_UNORD_Q));
  }
  EC_TARGET_AVX2 static V sum(V a, V b) {
    const V r = _mm256_add_ps(a, b);
    return nan_if_unordered(r, r, r);
  }
  // MINPS/MAXPS return their second operand for equal inputs: combining both orders (OR for
  // min, AND for max) merges -0 and +0 the way the scalar path does, and is a no-op for other
  // equal values.
  EC_TARGET_AVX2 static V min(V a, V b) {
    return nan_if_unordered(_mm256_or_ps(_mm256_min_ps(a, b), _mm256_min_ps(b, a)), a, b);
  }
  EC_TARGET_AVX2 static V max(V a, V b) {
    return nan_if_unordered(_mm256_and_ps(_mm256_max_ps(a, b), _mm256_max_ps(b, a)), a, b);
  }
};

struct F64Ops {
  using V = __m256d;
  EC_TARGET_AVX2 static V nan_if_unordered(V r, V x, V y) {
    return _mm256_blendv_pd(r, _mm256_castsi256_pd(_mm256_set1_epi64x(0x7FF8000000000000)),
                            _mm256_cmp_pd(x, y, _CMP_UNORD_Q));
  }
  EC_TARGET_AVX2 static V sum(V a, V b) {
    const V r = _mm256_add_pd(a, b);
    return nan_if_unordered(r, r, r);
  }
  EC_TARGET_AVX2 static V min(V a, V b) {
    return nan_if_unordered(_mm256_or_pd(_mm256_min_pd(a, b), _mm256_min_pd(b, a)), a, b);
  }
  EC_TARGET_AVX2 static V max(V a, V b) {
    return nan_if_unordered(_mm256_and_pd(_mm256_max_pd(a, b), _mm256_max_pd(b, a)), a, b);
  }
};

struct F32Lanes : F32Ops {
  using E = float;
  using Packed = V;
  static constexpr size_t kLanes = 8;
  EC_TARGET_AVX2 static V load(const float* p) { return _mm256_loadu_ps(p); }
  EC_TARGET_AVX2 static Packed pack(V v) { return v; }
  EC_TARGET_AVX2 static void store(float* p, Packed v) { _mm256_storeu_ps(p, v); }
};

struct F64Lanes : F64Ops {
  using E = double;
  using Packed = V;
  static constexpr size_t kLanes = 4;
  EC_TARGET_AVX2 static V load(const double* p) { return _mm256_loadu_pd(p); }
  EC_TARGET_AVX2 static Packed pack(V v) { return v; }
  EC_TARGET_AVX2 static void store(double* p, Packed v) { _mm256_storeu_pd(p, v); }
};

struct F16Lanes : F32Ops {
  using E = F16;
  using Packed = __m128i;
  static constexpr size_t kLanes = 8;
  EC_TARGET_AVX2 static V load(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  EC_TARGET_AVX2 static Packed pack(V v) { return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT); }
  EC_TARGET_AVX2 static void store(uint16_t* p, Packed v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v);
  }
};

// 16 bf16 per step, left where they are: the even elements are the low halves of the 32-bit
// lanes and the odd ones the high halves, so widening is a shift and a mask, and narrowing a
// blend, with no shuffles (the order of elements does not matter to an element-wise operator).
struct BF16Pair {
  __m256 even, odd;
};

struct BF16Lanes {
  using E = BF16;
  using V = BF16Pair;
  using Packed = __m256i;
  static constexpr size_t kLanes = 16;
  EC_TARGET_AVX2 static V load(const uint16_t* p) {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return {_mm256_castsi256_ps(_mm256_slli_epi32(raw, 16)),
            _mm256_castsi256_ps(_mm256_and_si256(raw, _mm256_set1_epi32(0xFFFF0000u)))};
  }
  // Round to nearest even on the integer bits; the bf16 is then in the top half. Results are
  // never non-canonical NaNs (the operators canonicalise them), so the NaN case of
  // float_to_bf16 cannot arise.
  EC_TARGET_AVX2 static __m256i round_to_top_half(__m256 v) {
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    return _mm256_add_epi32(bits, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7FFF)));
  }
  EC_TARGET_AVX2 static Packed pack(V v) {
    const __m256i high = _mm256_and_si256(round_to_top_half(v.odd), _mm256_set1_epi32(0xFFFF0000u));
    return _mm256_or_si256(high, _mm256_srli_epi32(round_to_top_half(v.even), 16));
  }
  EC_TARGET_AVX2 static void store(uint16_t* p, Packed v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
  }
  EC_TARGET_AVX2 static V sum(V a, V b) {
    return {F32Ops::sum(a.even, b.even), F32Ops::sum(a.odd, b.odd)};
  }
  EC_TARGET_AVX2 static V min(V a, V b) {
    return {F32Ops::min(a.even, b.even), F32Ops::min(a.odd, b.odd)};
  }
  EC_TARGET_AVX2 static V max(V a, V b) {
    return {F32Ops::max(a.even, b.even), F32Ops::max(a.odd, b.odd)};
  }
};

struct I32Lanes {
  using E = int32_t;
  using V = __m256i;
  using Packed = V;
  static constexpr size_t kLanes = 8;
  EC_TARGET_AVX2 static V load(const int32_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  EC_TARGET_AVX2 static Packed pack(V v) { return v; }
  EC_TARGET_AVX2 static void store(int32_t* p, Packed v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
  }
  EC_TARGET_AVX2 static V sum(V a, V b) { return _mm256_add_epi32(a, b); }
  EC_TARGET_AVX2 static V min(V a, V b) { return _mm256_min_epi32(a, b); }
  EC_TARGET_AVX2 static V max(V a, V b) { return _mm256_max_epi32(a, b); }
};

struct I64Lanes {
  using E = int64_t;
  using V = __m256i;
  using Packed = V;
  static constexpr size_t kLanes = 4;
  EC_TARGET_AVX2 static V load(const int64_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  EC_TARGET_AVX2 static Packed pack(V v) { return v; }
  EC_TARGET_AVX2 static void store(int64_t* p, Packed v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
  }
  EC_TARGET_AVX2 static V sum(V a, V b) { return _mm256_add_epi64(a, b); }
  // AVX2 has no 64-bit min/max: select with a compare.
  EC_TARGET_AVX2 static V min(V a, V b) {
    return _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(a, b));
  }
  EC_TARGET_AVX2 static V max(V a, V b) {
    return _mm256_blendv_epi8(b, a, _mm256_cmpgt_epi64(a, b));
  }
};

template <class E>
struct LanesFor;
template <>
struct LanesFor<float> : F32Lanes {};
template <>
struct LanesFor<double> : F64Lanes {};
template <>
struct LanesFor<F16> : F16Lanes {};
template <>
struct LanesFor<BF16> : BF16Lanes {};
template <>
struct LanesFor<int32_t> : I32Lanes {};
template <>
struct LanesFor<int64_t> : I64Lanes {};

template <class L, class Op>
EC_TARGET_AVX2 inline typename L::V apply(typename L::V a, typename L::V b) {
  if constexpr (std::is_same_v<Op, Sum>) {
    return L::sum(a, b);
  } else if constexpr (std::is_same_v<Op, Min>) {
    return L::min(a, b);
  } else {
    return L::max(a, b);
  }
}

struct Family {
  template <class E, class Op, bool kTwo>
  EC_TARGET_AVX2 static void run(void* out1, void* out2, const void* a, const void* b, size_t n) {
    using L = LanesFor<E>;
    using S = typename Element<E>::Storage;
    auto* o1 = static_cast<S*>(out1);
    auto* o2 = static_cast<S*>(out2);
    const auto* pa = static_cast<const S*>(a);
    const auto* pb = static_cast<const S*>(b);
    size_t i = 0;
    // Two vectors per iteration: loads of both before any store (in-place safety), and enough
    // independent work to hide the conversion latency of the 16-bit types.
    for (; i + 2 * L::kLanes <= n; i += 2 * L::kLanes) {
      const typename L::V a0 = L::load(pa + i);
      const typename L::V b0 = L::load(pb + i);
      const typename L::V a1 = L::load(pa + i + L::kLanes);
      const typename L::V b1 = L::load(pb + i + L::kLanes);
      const typename L::Packed r0 = L::pack(apply<L, Op>(a0, b0));
      const typename L::Packed r1 = L::pack(apply<L, Op>(a1, b1));
      L::store(o1 + i, r0);
      L::store(o1 + i + L::kLanes, r1);
      if constexpr (kTwo) {
        L::store(o2 + i, r0);
        L::store(o2 + i + L::kLanes, r1);
      }
    }
    if (i + L::kLanes <= n) {
      const typename L::Packed r = L::pack(apply<L, Op>(L::load(pa + i), L::load(pb + i)));
      L::store(o1 + i, r);
      if constexpr (kTwo) L::store(o2 + i, r);
      i += L::kLanes;
    }
    scalar_loop<E, Op, kTwo>(o1 + i, kTwo ? o2 + i : nullptr, pa + i, pb + i, n - i);
  }

  EC_TARGET_AVX2 static void copy2(void* out1, void* out2, const void* in, size_t bytes) {
    auto* o1 = static_cast<unsigned char*>(out1);
    auto* o2 = static_cast<unsigned char*>(out2);
    const auto* src = static_cast<const unsigned char*>(in);
    constexpr size_t kStep = 4 * sizeof(__m256i);
    size_t i = 0;
    for (; i + kStep <= bytes; i += kStep) {
      const auto* from = reinterpret_cast<const __m256i*>(src + i);
      auto* to1 = reinterpret_cast<__m256i*>(o1 + i);
      auto* to2 = reinterpret_cast<__m256i*>(o2 + i);
      const __m256i v0 = _mm256_loadu_si256(from);
      const __m256i v1 = _mm256_loadu_si256(from + 1);
      const __m256i v2 = _mm256_loadu_si256(from + 2);
      const __m256i v3 = _mm256_loadu_si256(from + 3);
      _mm256_storeu_si256(to1, v0);
      _mm256_storeu_si256(to1 + 1, v1);
      _mm256_storeu_si256(to1 + 2, v2);
      _mm256_storeu_si256(to1 + 3, v3);
      _mm256_storeu_si256(to2, v0);
      _mm256_storeu_si256(to2 + 1, v1);
      _mm256_storeu_si256(to2 + 2, v2);
      _mm256_storeu_si256(to2 + 3, v3);
    }
    if (i < bytes) {  // memcpy wants non-null pointers even for zero bytes
      std::memcpy(o1 + i, src + i, bytes - i);
      std::memcpy(o2 + i, src + i, bytes - i);
    }
  }
};

}  // namespace avx2

namespace avx512 {

struct F32Ops {
  using V = __m512;
  EC_TARGET_AVX512 static V nan_if_unordered(V r, V x, V y) {
    return _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(x, y, _CMP_UNORD_Q),
                              _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000)));
  }
  EC_TARGET_AVX512 static V sum(V a, V b) {
    const V r = _mm512_add_ps(a, b);
    return nan_if_unordered(r, r, r);
  }
  // See avx2::F32Ops for why both operand orders are combined.
  EC_TARGET_AVX512 static V min(V a, V b) {
    return nan_if_unordered(_mm512_or_ps(_mm512_min_ps(a, b), _mm512_min_ps(b, a)), a, b);
  }
  EC_TARGET_AVX512 static V max(V a, V b) {
    return nan_if_unordered(_mm512_and_ps(_mm512_max_ps(a, b), _mm512_max_ps(b, a)), a, b);
  }
};

struct F64Ops {
  using V = __m512d;
  EC_TARGET_AVX512 static V nan_if_unordered(V r, V x, V y) {
    return _mm512_mask_mov_pd(r, _mm512_cmp_pd_mask(x, y, _CMP_UNORD_Q),
                              _mm512_castsi512_pd(_mm512_set1_epi64(0x7FF8000000000000)));
  }
  EC_TARGET_AVX512 static V sum(V a, V b) {
    const V r = _mm512_add_pd(a, b);
    return nan_if_unordered(r, r, r);
  }
  EC_TARGET_AVX512 static V min(V a, V b) {
    return nan_if_unordered(_mm512_or_pd(_mm512_min_pd(a, b), _mm512_min_pd(b, a)), a, b);
  }
  EC_TARGET_AVX512 static V max(V a, V b) {
    return nan_if_unordered(_mm512_and_pd(_mm512_max_pd(a, b), _mm512_max_pd(b, a)), a, b);
  }
};

// Masks select the first `rem` lanes, for the tail (masked-off lanes are never touched in
// memory, so a partial vector at the end of a buffer cannot fault).
inline __mmask16 mask16(size_t rem) { return static_cast<__mmask16>((1u << rem) - 1u); }
inline __mmask8 mask8(size_t rem) { return static_cast<__mmask8>((1u << rem) - 1u); }

struct F32Lanes : F32Ops {
  using E = float;
  using Packed = V;
  static constexpr size_t kLanes = 16;
  EC_TARGET_AVX512 static V load(const float* p) { return _mm512_loadu_ps(p); }
  EC_TARGET_AVX512 static V load(const float* p, size_t rem) {
    return _mm512_maskz_loadu_ps(mask16(rem), p);
  }
  EC_TARGET_AVX512 static Packed pack(V v) { return v; }
  EC_TARGET_AVX512 static void store(float* p, Packed v) { _mm512_storeu_ps(p, v); }
  EC_TARGET_AVX512 static void store(float* p, Packed v, size_t rem) {
    _mm512_mask_storeu_ps(p, mask16(rem), v);
  }
};

struct F64Lanes : F64Ops {
  using E = double;
  using Packed = V;
  static constexpr size_t kLanes = 8;
  EC_TARGET_AVX512 static V load(const double* p) { return _mm512_loadu_pd(p); }
  EC_TARGET_AVX512 static V load(const double* p, size_t rem) {
    return _mm512_maskz_loadu_pd(mask8(rem), p);
  }
  EC_TARGET_AVX512 static Packed pack(V v) { return v; }
  EC_TARGET_AVX512 static void store(double* p, Packed v) { _mm512_storeu_pd(p, v); }
  EC_TARGET_AVX512 static void store(double* p, Packed v, size_t rem) {
    _mm512_mask_storeu_pd(p, mask8(rem), v);
  }
};

// 16 halves in a 256-bit register, 16 floats in a 512-bit one.
struct Half16 {
  using Packed = __m256i;
  static constexpr size_t kLanes = 16;
  EC_TARGET_AVX512 static __m256i load_raw(const uint16_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  EC_TARGET_AVX512 static __m256i load_raw(const uint16_t* p, size_t rem) {
    return _mm256_maskz_loadu_epi16(mask16(rem), p);
  }
  EC_TARGET_AVX512 static void store(uint16_t* p, Packed v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
  }
  EC_TARGET_AVX512 static void store(uint16_t* p, Packed v, size_t rem) {
    _mm256_mask_storeu_epi16(p, mask16(rem), v);
  }
};

struct F16Lanes : F32Ops, Half16 {
  using E = F16;
  using Half16::Packed;
  EC_TARGET_AVX512 static V load(const uint16_t* p) { return _mm512_cvtph_ps(load_raw(p)); }
  EC_TARGET_AVX512 static V load(const uint16_t* p, size_t rem) {
    return _mm512_cvtph_ps(load_raw(p, rem));
  }
  EC_TARGET_AVX512 static Packed pack(V v) { return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT); }
};

// 32 bf16 per step, even and odd elements apart as in avx2::BF16Lanes.
struct BF16Pair {
  __m512 even, odd;
};

inline __mmask32 mask32(size_t rem) { return static_cast<__mmask32>((uint32_t{1} << rem) - 1u); }

struct BF16Lanes {
  using E = BF16;
  using V = BF16Pair;
  using Packed = __m512i;
  static constexpr size_t kLanes = 32;
  EC_TARGET_AVX512 static V widen(__m512i raw) {
    return {_mm512_castsi512_ps(_mm512_slli_epi32(raw, 16)),
            _mm512_castsi512_ps(_mm512_and_si512(raw, _mm512_set1_epi32(0xFFFF0000u)))};
  }
  EC_TARGET_AVX512 static V load(const uint16_t* p) { return widen(_mm512_loadu_si512(p)); }
  EC_TARGET_AVX512 static V load(const uint16_t* p, size_t rem) {
    return widen(_mm512_maskz_loadu_epi16(mask32(rem), p));
  }
  // Integer round to nearest even (not VCVTNEPS2BF16, which flushes subnormals to zero); the
  // operators never produce a non-canonical NaN, so no NaN special case is needed.
  EC_TARGET_AVX512 static __m512i round_to_top_half(__m512 v) {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    return _mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF)));
  }
  EC_TARGET_AVX512 static Packed pack(V v) {
    const __m512i high = _mm512_and_si512(round_to_top_half(v.odd), _mm512_set1_epi32(0xFFFF0000u));
    return _mm512_or_si512(high, _mm512_srli_epi32(round_to_top_half(v.even), 16));
  }
  EC_TARGET_AVX512 static void store(uint16_t* p, Packed v) { _mm512_storeu_si512(p, v); }
  EC_TARGET_AVX512 static void store(uint16_t* p, Packed v, size_t rem) {
    _mm512_mask_storeu_epi16(p, mask32(rem), v);
  }
  EC_TARGET_AVX512 static V sum(V a, V b) {
    return {F32Ops::sum(a.even, b.even), F32Ops::sum(a.odd, b.odd)};
  }
  EC_TARGET_AVX512 static V min(V a, V b) {
    return {F32Ops::min(a.even, b.even), F32Ops::min(a.odd, b.odd)};
  }
  EC_TARGET_AVX512 static V max(V a, V b) {
    return {F32Ops::max(a.even, b.even), F32Ops::max(a.odd, b.odd)};
  }
};

struct I32Lanes {
  using E = int32_t;
  using V = __m512i;
  using Packed = V;
  static constexpr size_t kLanes = 16;
  EC_TARGET_AVX512 static V load(const int32_t* p) { return _mm512_loadu_si512(p); }
  EC_TARGET_AVX512 static V load(const int32_t* p, size_t rem) {
    return _mm512_maskz_loadu_epi32(mask16(rem), p);
  }
  EC_TARGET_AVX512 static Packed pack(V v) { return v; }
  EC_TARGET_AVX512 static void store(int32_t* p, Packed v) { _mm512_storeu_si512(p, v); }
  EC_TARGET_AVX512 static void store(int32_t* p, Packed v, size_t rem) {
    _mm512_mask_storeu_epi32(p, mask16(rem), v);
  }
  EC_TARGET_AVX512 static V sum(V a, V b) { return _mm512_add_epi32(a, b); }
  EC_TARGET_AVX512 static V min(V a, V b) { return _mm512_min_epi32(a, b); }
  EC_TARGET_AVX512 static V max(V a, V b) { return _mm512_max_epi32(a, b); }
};

struct I64Lanes {
  using E = int64_t;
  using V = __m512i;
  using Packed = V;
  static constexpr size_t kLanes = 8;
  EC_TARGET_AVX512 static V load(const int64_t* p) { return _mm512_loadu_si512(p); }
  EC_TARGET_AVX512 static V load(const int64_t* p, size_t rem) {
    return _mm512_maskz_loadu_epi64(mask8(rem), p);
  }
  EC_TARGET_AVX512 static Packed pack(V v) { return v; }
  EC_TARGET_AVX512 static void store(int64_t* p, Packed v) { _mm512_storeu_si512(p, v); }
  EC_TARGET_AVX512 static void store(int64_t* p, Packed v, size_t rem) {
    _mm512_mask_storeu_epi64(p, mask8(rem), v);
  }
  EC_TARGET_AVX512 static V sum(V a, V b) { return _mm512_add_epi64(a, b); }
  EC_TARGET_AVX512 static V min(V a, V b) { return _mm512_min_epi64(a, b); }
  EC_TARGET_AVX512 static V max(V a, V b) { return _mm512_max_epi64(a, b); }
};

template <class E>
struct LanesFor;
template <>
struct LanesFor<float> : F32Lanes {};
template <>
struct LanesFor<double> : F64Lanes {};
template <>
struct LanesFor<F16> : F16Lanes {};
template <>
struct LanesFor<BF16> : BF16Lanes {};
template <>
struct LanesFor<int32_t> : I32Lanes {};
template <>
struct LanesFor<int64_t> : I64Lanes {};

template <class L, class Op>
EC_TARGET_AVX512 inline typename L::V apply(typename L::V a, typename L::V b) {
  if constexpr (std::is_same_v<Op, Sum>) {
    return L::sum(a, b);
  } else if constexpr (std::is_same_v<Op, Min>) {
    return L::min(a, b);
  } else {
    return L::max(a, b);
  }
}

struct Family {
  template <class E, class Op, bool kTwo>
  EC_TARGET_AVX512 static void run(void* out1, void* out2, const void* a, const void* b, size_t n) {
    using L = LanesFor<E>;
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
      const typename L::Packed r0 = L::pack(apply<L, Op>(a0, b0));
      const typename L::Packed r1 = L::pack(apply<L, Op>(a1, b1));
      L::store(o1 + i, r0);
      L::store(o1 + i + L::kLanes, r1);
      if constexpr (kTwo) {
        L::store(o2 + i, r0);
        L::store(o2 + i + L::kLanes, r1);
      }
    }
    if (i + L::kLanes <= n) {
      const typename L::Packed r = L::pack(apply<L, Op>(L::load(pa + i), L::load(pb + i)));
      L::store(o1 + i, r);
      if constexpr (kTwo) L::store(o2 + i, r);
      i += L::kLanes;
    }
    if (i < n) {
      const size_t rem = n - i;
      const typename L::Packed r =
          L::pack(apply<L, Op>(L::load(pa + i, rem), L::load(pb + i, rem)));
      L::store(o1 + i, r, rem);
      if constexpr (kTwo) L::store(o2 + i, r, rem);
    }
  }

  EC_TARGET_AVX512 static void copy2(void* out1, void* out2, const void* in, size_t bytes) {
    auto* o1 = static_cast<unsigned char*>(out1);
    auto* o2 = static_cast<unsigned char*>(out2);
    const auto* src = static_cast<const unsigned char*>(in);
    constexpr size_t kStep = 4 * sizeof(__m512i);
    size_t i = 0;
    for (; i + kStep <= bytes; i += kStep) {
      const __m512i v0 = _mm512_loadu_si512(src + i);
      const __m512i v1 = _mm512_loadu_si512(src + i + 64);
      const __m512i v2 = _mm512_loadu_si512(src + i + 128);
      const __m512i v3 = _mm512_loadu_si512(src + i + 192);
      _mm512_storeu_si512(o1 + i, v0);
      _mm512_storeu_si512(o1 + i + 64, v1);
      _mm512_storeu_si512(o1 + i + 128, v2);
      _mm512_storeu_si512(o1 + i + 192, v3);
      _mm512_storeu_si512(o2 + i, v0);
      _mm512_storeu_si512(o2 + i + 64, v1);
      _mm512_storeu_si512(o2 + i + 128, v2);
      _mm512_storeu_si512(o2 + i + 192, v3);
    }
    for (; i < bytes; i += 64) {
      const size_t rem = bytes - i < 64 ? bytes - i : 64;
      const __mmask64 k = rem == 64 ? ~__mmask64{0} : ((__mmask64{1} << rem) - 1);
      const __m512i v = _mm512_maskz_loadu_epi8(k, src + i);
      _mm512_mask_storeu_epi8(o1 + i, k, v);
      _mm512_mask_storeu_epi8(o2 + i, k, v);
    }
  }
};

}  // namespace avx512

constexpr KernelTable kAvx2Table = make_table<avx2::Family>("avx2");
constexpr KernelTable kAvx512Table = make_table<avx512::Family>("avx512");

bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

#undef EC_TARGET_AVX2
#undef EC_TARGET_AVX512

#endif  // defined(__x86_64__)

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
  if (isa == detail::KernelIsa::kAvx512 && isa_available(isa)) return kAvx512Table;
  if (isa == detail::KernelIsa::kAvx2 && isa_available(isa)) return kAvx2Table;
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
