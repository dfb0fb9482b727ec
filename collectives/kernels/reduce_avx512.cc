// The AVX-512 (F, VL, BW, DQ) reduction kernels: 512-bit lanes of every element type, with masked
// tails, run by the one SIMD loop (reduce_simd_loop.h); see reduce_avx2.cc for the lanes' shape.
// Every function here that takes or returns a vector carries EC_TARGET_AVX512, the loops included
// (EC_SIMD_TARGET, see reduce_simd_loop.h), so no vector crosses a call between targets.

#define EC_TARGET_AVX512 __attribute__((target("avx,avx2,f16c,avx512f,avx512vl,avx512bw,avx512dq")))
#define EC_SIMD_TARGET EC_TARGET_AVX512
#include "collectives/kernels/reduce_simd_loop.h"
#include "collectives/kernels/reduce_table.h"

#if defined(__x86_64__)

namespace eagercomm::reduce_impl {
namespace {

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
  // See F32Ops in reduce_avx2.cc for why both operand orders are combined.
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

// A register of bytes for copy2, with a masked tail.
struct Bytes {
  using V = __m512i;
  static constexpr size_t kBytes = sizeof(V);
  static __mmask64 mask64(size_t rem) {
    return rem == 64 ? ~__mmask64{0} : ((__mmask64{1} << rem) - 1);
  }
  EC_TARGET_AVX512 static V load(const unsigned char* p) { return _mm512_loadu_si512(p); }
  EC_TARGET_AVX512 static V load(const unsigned char* p, size_t rem) {
    return _mm512_maskz_loadu_epi8(mask64(rem), p);
  }
  EC_TARGET_AVX512 static void store(unsigned char* p, V v) { _mm512_storeu_si512(p, v); }
  EC_TARGET_AVX512 static void store(unsigned char* p, V v, size_t rem) {
    _mm512_mask_storeu_epi8(p, mask64(rem), v);
  }
};

struct Family {
  template <class E, class Op, bool kTwo>
  EC_TARGET_AVX512 [[gnu::flatten]] static void run(void* out1, void* out2, const void* a,
                                                    const void* b, size_t n) {
    simd_reduce_loop<E, LanesFor<E>, Op, kTwo>(out1, out2, a, b, n);
  }
  EC_TARGET_AVX512 [[gnu::flatten]] static void copy2(void* out1, void* out2, const void* in,
                                                      size_t bytes) {
    simd_copy2_loop<Bytes>(out1, out2, in, bytes);
  }
};

#undef EC_TARGET_AVX512
#undef EC_SIMD_TARGET

constexpr KernelTable kTable = make_table<Family>("avx512");

}  // namespace

const KernelTable& avx512_table() { return kTable; }

}  // namespace eagercomm::reduce_impl

#endif  // defined(__x86_64__)
