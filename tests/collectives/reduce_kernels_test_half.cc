// reduce_kernels_test (tests/collectives/reduce_kernels_test.cc), the half conversions
// (collectives/kernels/half.h) the kernels use: every f16 and bf16 pattern, rounding cases,
// nearest-even for random floats, and agreement with the F16C instructions.
#include "collectives/kernels/half.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace eagercomm {
namespace {

// ------------------------------------------------------------------------------------------------
// Half conversions.

// The value of f16 bits, from the definition of binary16 (independent of half.h).
double f16_value(uint16_t h) {
  const int exponent = (h >> 10) & 0x1F;
  const int mantissa = h & 0x3FF;
  const double magnitude =
      exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(1024 + mantissa, exponent - 25);
  return (h & 0x8000) ? -magnitude : magnitude;
}

TEST(HalfConversions, EveryF16PatternConvertsExactlyAndRoundTrips) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = half_to_float(h);
    ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;
    if ((h & 0x7C00) == 0x7C00) {
      if ((h & 0x3FF) == 0) {
        ASSERT_TRUE(std::isinf(f)) << std::hex << h;
        ASSERT_EQ(float_to_half(f), h);
      } else {
        // NaN stays NaN with its payload; a signaling NaN comes back quiet.
        ASSERT_TRUE(std::isnan(f)) << std::hex << h;
        ASSERT_EQ(float_to_half(f), h | 0x0200) << std::hex << h;
      }
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), f16_value(h)) << std::hex << h;
    ASSERT_EQ(float_to_half(f), h) << std::hex << h;
  }
}

TEST(HalfConversions, EveryBf16PatternConvertsExactlyAndRoundTrips) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto b = static_cast<uint16_t>(i);
    const float f = bf16_to_float(b);
    ASSERT_EQ(std::bit_cast<uint32_t>(f), i << 16);
    if ((b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0) {
      ASSERT_EQ(float_to_bf16(f), b | 0x0040) << std::hex << b;  // quiet NaN
    } else {
      ASSERT_EQ(float_to_bf16(f), b) << std::hex << b;
    }
  }
}

TEST(HalfConversions, FloatToHalfRoundingCases) {
  auto h = [](float f) { return float_to_half(f); };
  // Ties to even in the normal range.
  EXPECT_EQ(h(1.0f + 0x1p-11f), 0x3C00);             // halfway 1 .. 1+2^-10 -> 1
  EXPECT_EQ(h(1.0f + 3 * 0x1p-11f), 0x3C02);         // halfway odd .. even -> even
  EXPECT_EQ(h(1.0f + 0x1p-11f + 0x1p-23f), 0x3C01);  // just above halfway
  EXPECT_EQ(h(1.0f + 0x1p-11f - 0x1p-23f), 0x3C00);  // just below halfway
  EXPECT_EQ(h(-(1.0f + 3 * 0x1p-11f)), 0xBC02);
  EXPECT_EQ(h(2047.0f + 0.5f), 0x6800);  // 2047.5 rounds up to 2048
  // Overflow.
  EXPECT_EQ(h(65504.0f), 0x7BFF);
  EXPECT_EQ(h(65519.99f), 0x7BFF);
  EXPECT_EQ(h(65520.0f), 0x7C00);
  EXPECT_EQ(h(-65520.0f), 0xFC00);
  EXPECT_EQ(h(1e10f), 0x7C00);
  EXPECT_EQ(h(std::numeric_limits<float>::max()), 0x7C00);
  EXPECT_EQ(h(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(h(-std::numeric_limits<float>::infinity()), 0xFC00);
  // Subnormals and underflow.
  EXPECT_EQ(h(0x1p-24f), 0x0001);
  EXPECT_EQ(h(0x1p-25f), 0x0000);  // tie between 0 and 2^-24 -> 0
  EXPECT_EQ(h(0x1p-25f + 0x1p-40f), 0x0001);
  EXPECT_EQ(h(3 * 0x1p-25f), 0x0002);         // tie 1.5 units -> 2
  EXPECT_EQ(h(5 * 0x1p-25f), 0x0002);         // tie 2.5 units -> 2
  EXPECT_EQ(h(0x1p-14f - 0x1p-25f), 0x0400);  // tie 1023.5 units -> 1024 (normal)
  EXPECT_EQ(h(0x1p-14f - 0x1p-24f), 0x03FF);
  EXPECT_EQ(h(-0x1p-24f), 0x8001);
  EXPECT_EQ(h(-0x1p-30f), 0x8000);  // underflow keeps the sign
  EXPECT_EQ(h(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(h(0.0f), 0x0000);
  EXPECT_EQ(h(-0.0f), 0x8000);
  // NaN stays NaN, even when its payload lies only in the bits that are dropped.
  const uint16_t low_payload_nan = h(std::bit_cast<float>(0x7F800001u));
  EXPECT_EQ(low_payload_nan & 0x7C00, 0x7C00);
  EXPECT_NE(low_payload_nan & 0x03FF, 0);
  EXPECT_EQ(h(std::bit_cast<float>(0xFFC00000u)), 0xFE00);
}

TEST(HalfConversions, FloatToBf16RoundingCases) {
  auto b = [](uint32_t bits) { return float_to_bf16(std::bit_cast<float>(bits)); };
  EXPECT_EQ(b(0x3F808000u), 0x3F80);  // tie, even below -> down
  EXPECT_EQ(b(0x3F818000u), 0x3F82);  // tie, odd below -> up
  EXPECT_EQ(b(0x3F808001u), 0x3F81);
  EXPECT_EQ(b(0x3F807FFFu), 0x3F80);
  EXPECT_EQ(b(0xBF818000u), 0xBF82);
  EXPECT_EQ(b(0x7F7F7FFFu), 0x7F7F);  // largest bf16 stays finite
  EXPECT_EQ(b(0x7F7F8000u), 0x7F80);  // tie at the top (odd) overflows to inf
  EXPECT_EQ(b(0x7F7FFFFFu), 0x7F80);
  EXPECT_EQ(b(0xFF7FFFFFu), 0xFF80);
  EXPECT_EQ(b(0x7F800000u), 0x7F80);
  EXPECT_EQ(b(0x00008000u), 0x0000);  // subnormal tie -> even (0)
  EXPECT_EQ(b(0x00018000u), 0x0002);
  EXPECT_EQ(b(0x00007FFFu), 0x0000);
  EXPECT_EQ(b(0x007FFFFFu), 0x0080);  // largest float subnormal rounds to the smallest normal
  EXPECT_EQ(b(0x80000001u), 0x8000);
  EXPECT_EQ(b(0x7F800001u), 0x7FC0);  // NaN with a low payload does not become inf
  EXPECT_EQ(b(0xFF800001u), 0xFFC0);
  EXPECT_EQ(b(0x7FBF0000u), 0x7FFF);  // signalling NaN is quieted, payload kept
}

// Property check valid on every machine: the result is a nearest half, ties go to even.
TEST(HalfConversions, FloatToHalfIsNearestEvenForRandomFloats) {
  std::mt19937_64 rng(6);
  for (int iter = 0; iter < 2'000'000; ++iter) {
    // Random bits, biased to the exponents where binary16 lives.
    uint32_t bits = static_cast<uint32_t>(rng());
    if (iter % 2 == 0) bits = (bits & 0x807FFFFFu) | ((101u + (bits >> 24) % 42u) << 23);
    const float f = std::bit_cast<float>(bits);
    if (std::isnan(f)) continue;
    const uint16_t h = float_to_half(f);
    ASSERT_EQ((h & 0x8000) != 0, std::signbit(f)) << std::hex << bits;
    const double target = std::fabs(static_cast<double>(f));
    const uint16_t m = h & 0x7FFF;
    if (target >= 65520.0) {
      ASSERT_EQ(m, 0x7C00) << std::hex << bits;
      continue;
    }
    ASSERT_LT(m, 0x7C00) << std::hex << bits;
    const double err = std::fabs(f16_value(m) - target);
    const double err_up = std::fabs(f16_value(static_cast<uint16_t>(m + 1)) - target);
    ASSERT_LE(err, err_up) << std::hex << bits;
    if (err == err_up) {
      ASSERT_EQ(m & 1, 0) << "tie not to even: " << std::hex << bits;
    }
    if (m > 0) {
      const double err_down = std::fabs(f16_value(static_cast<uint16_t>(m - 1)) - target);
      ASSERT_LE(err, err_down) << std::hex << bits;
      if (err == err_down) {
        ASSERT_EQ(m & 1, 0) << "tie not to even: " << std::hex << bits;
      }
    }
  }
}

#if defined(__x86_64__)
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
__attribute__((target("f16c"))) uint16_t hardware_float_to_half(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float hardware_half_to_float(uint16_t h) { return _cvtsh_ss(h); }

// The vector kernels convert with F16C; the scalar path with half.h. They must agree exactly.
TEST(HalfConversions, MatchF16cInstructionsBitForBit) {
  if (!cpu_has_f16c()) GTEST_SKIP() << "no F16C on this CPU";
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    ASSERT_EQ(std::bit_cast<uint32_t>(half_to_float(h)),
              std::bit_cast<uint32_t>(hardware_half_to_float(h)))
        << std::hex << h;
  }
  std::mt19937_64 rng(7);
  for (int iter = 0; iter < 4'000'000; ++iter) {
    uint32_t bits = static_cast<uint32_t>(rng());
    if (iter % 4 != 0) bits = (bits & 0x807FFFFFu) | ((100u + (bits >> 24) % 44u) << 23);
    if (iter % 8 == 1) bits &= ~0x1FFFu;                    // exact halves and near-ties
    if (iter % 8 == 2) bits = (bits & ~0x1FFFu) | 0x1000u;  // exact ties
    const float f = std::bit_cast<float>(bits);
    ASSERT_EQ(float_to_half(f), hardware_float_to_half(f)) << std::hex << bits;
  }
}
#endif

static_assert(float_to_half(1.0f) == 0x3C00);
static_assert(half_to_float(0x3C00) == 1.0f);
static_assert(float_to_bf16(1.0f) == 0x3F80);
static_assert(bf16_to_float(0xC000) == -2.0f);

}  // namespace
}  // namespace eagercomm
