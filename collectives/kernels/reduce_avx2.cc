// The AVX2 + F16C reduction kernels: 256-bit lanes of every element type, run by the one SIMD
// loop (reduce_simd_loop.h). Each lanes struct loads a vector of elements widened to the type the
// operator works in (16-bit floats become float), applies sum/min/max with exactly the scalar
// semantics (reduce_scalar.h), and narrows/stores the result. Loads and stores are unaligned.
// Every function here that takes or returns a vector carries EC_TARGET_AVX2, the loops included
// (EC_SIMD_TARGET, see reduce_simd_loop.h), so no vector crosses a call between targets.

#define EC_TARGET_AVX2 __attribute__((target("avx,avx2,f16c")))
#define EC_SIMD_TARGET EC_TARGET_AVX2
#include "collectives/kernels/reduce_simd_loop.h"
#include "collectives/kernels/reduce_table.h"

#if defined(__x86_64__)

namespace eagercomm::reduce_impl {
namespace {

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

// A register of bytes for copy2.
struct Bytes {
  using V = __m256i;
  static constexpr size_t kBytes = sizeof(V);
  EC_TARGET_AVX2 static V load(const unsigned char* p) {
    return _mm256_loadu_si256(reinterpret_cast<const V*>(p));
  }
  EC_TARGET_AVX2 static void store(unsigned char* p, V v) {
    _mm256_storeu_si256(reinterpret_cast<V*>(p), v);
  }
};

struct Family {
  template <class E, class Op, bool kTwo>
  EC_TARGET_AVX2 [[gnu::flatten]] static void run(void* out1, void* out2, const void* a,
                                                  const void* b, size_t n) {
    simd_reduce_loop<E, LanesFor<E>, Op, kTwo>(out1, out2, a, b, n);
  }
  EC_TARGET_AVX2 [[gnu::flatten]] static void copy2(void* out1, void* out2, const void* in,
                                                    size_t bytes) {
    simd_copy2_loop<Bytes>(out1, out2, in, bytes);
  }
};

#undef EC_TARGET_AVX2
#undef EC_SIMD_TARGET

constexpr KernelTable kTable = make_table<Family>("avx2");

}  // namespace

const KernelTable& avx2_table() { return kTable; }

}  // namespace eagercomm::reduce_impl

#endif  // defined(__x86_64__)
