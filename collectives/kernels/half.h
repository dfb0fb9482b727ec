// Exact scalar conversions between float and the two 16-bit float formats of DataType.
//
// f16 is IEEE 754 binary16 (1 sign, 5 exponent, 10 mantissa bits); bf16 is the top 16 bits of a
// binary32. Every conversion is exact where the value fits and otherwise rounds to nearest, ties
// to even, overflowing to infinity; subnormals are converted exactly, whatever MXCSR/FPCR says.
// A NaN stays a NaN of the same sign, made quiet, keeping the top payload bits: the same bits the
// x86 F16C instructions (VCVTPH2PS, VCVTPS2PH) produce, so the scalar and the vector kernels agree
// bit for bit. All functions are pure, constexpr and thread-safe.
#pragma once

#include <bit>
#include <cstdint>

namespace eagercomm {

// f16 bits -> float. Exact for every input (sNaN becomes the matching qNaN).
constexpr float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1F) {
    if (mantissa == 0) return std::bit_cast<float>(sign | 0x7F800000u);
    return std::bit_cast<float>(sign | 0x7FC00000u | (mantissa << 13));
  }
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, which is exact in float (a normal float, so no
    // denormals-are-zero mode can touch it).
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
  }
  // Rebias the exponent from 15 to 127.
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// float -> f16 bits, rounding to nearest even; |f| >= 65520 becomes infinity.
constexpr uint16_t float_to_half(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude >= 0x7F800000u) {  // infinity or NaN
    if (magnitude == 0x7F800000u) return static_cast<uint16_t>(sign | 0x7C00u);
    return static_cast<uint16_t>(sign | 0x7E00u | ((magnitude >> 13) & 0x3FFu));
  }
  // 65520 is halfway between the largest half (65504, odd mantissa) and 2^16: ties go up.
  if (magnitude >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);
  if (magnitude >= 0x38800000u) {  // normal half (>= 2^-14)
    // Round the 13 dropped bits to nearest even; a carry into the exponent is the right answer.
    const uint32_t rounded = magnitude + 0xFFFu + ((magnitude >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
  }
  // Subnormal half: the result counts units of 2^-24.
  const uint32_t exponent = magnitude >> 23;
  if (exponent < 102) return static_cast<uint16_t>(sign);  // below 2^-25: rounds to zero
  const uint32_t significand = (magnitude & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126 - exponent;  // 14..24
  uint32_t units = significand >> shift;
  const uint32_t remainder = significand & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  if (remainder > halfway || (remainder == halfway && (units & 1u))) ++units;
  // units may reach 0x400, which is exactly the encoding of the smallest normal half.
  return static_cast<uint16_t>(sign | units);
}

// bf16 bits -> float. Exact: a bf16 is the top half of a float.
constexpr float bf16_to_float(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// float -> bf16 bits, rounding to nearest even (overflow rounds to infinity by itself).
constexpr uint16_t float_to_bf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {
    // Truncating a NaN whose payload lies in the low bits would give infinity: keep it a NaN.
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

}  // namespace eagercomm
