#include "collectives/partial/partial_meta.h"

#include <algorithm>

#include "collectives/kernels/element_value.h"

namespace eagercomm::detail {
namespace {

// Three 32-bit words per rank: age + 1; posts << 1 | fresh; compute_us << 6 | measured.
constexpr int kWords = 3;

// Bits of one digit: every integer below 2^bits is exact in the type.
int digit_bits(DataType type) {
  switch (type) {
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 8;
    case DataType::kFloat32:
    case DataType::kInt32:
      return 16;
    case DataType::kFloat64:
    case DataType::kInt64:
      return 32;
  }
  return 8;
}

int digits(DataType type) { return 32 / digit_bits(type); }

// Digits are small integers, exact in every type (digit_bits), so element_value.h's conversions
// through double are exact too.
void store_digit(DataType type, void* base, size_t i, uint32_t d) {
  store_element(type, base, i, static_cast<double>(d));
}

uint32_t load_digit(DataType type, const void* base, size_t i) {
  const double limit = static_cast<double>((uint64_t{1} << digit_bits(type)) - 1);
  const double v = load_element(type, base, i);
  // Only a corrupted tail leaves the range (or is NaN); never read it as a huge count.
  if (!(v >= 0)) return 0;
  return static_cast<uint32_t>(std::min(v, limit));
}

void store_word(DataType type, void* tail, size_t first, uint32_t w) {
  const int bits = digit_bits(type);
  const uint32_t mask = bits == 32 ? 0xffffffffu : (1u << bits) - 1;
  for (int d = 0; d < digits(type); ++d) {
    store_digit(type, tail, first + d, bits == 32 ? w : (w >> (d * bits)) & mask);
  }
}

uint32_t load_word(DataType type, const void* tail, size_t first) {
  const int bits = digit_bits(type);
  uint32_t w = 0;
  for (int d = 0; d < digits(type); ++d) {
    const uint32_t digit = load_digit(type, tail, first + d);
    w |= bits == 32 ? digit : digit << (d * bits);
  }
  return w;
}

size_t slot(DataType type, int rank, int word) {
  return (static_cast<size_t>(rank) * kWords + word) * static_cast<size_t>(digits(type));
}

}  // namespace

size_t meta_elements(DataType type, int size) {
  return static_cast<size_t>(std::max(size, 0)) * kWords * static_cast<size_t>(digits(type));
}

void write_rank_meta(void* tail, DataType type, int size, int rank, const RankMeta& meta) {
  if (rank < 0 || rank >= size) return;
  // Clamped, not wrapped: an age or a count past 2^31 would be absurd, never a silent zero.
  const uint32_t age1 =
      meta.age < 0
          ? 0u
          : static_cast<uint32_t>(std::min<int64_t>(int64_t{meta.age} + 1, int64_t{0x7fffffff}));
  const uint32_t posts = static_cast<uint32_t>(std::clamp(meta.posts, 0, 0x7fffffff));
  store_word(type, tail, slot(type, rank, 0), age1);
  store_word(type, tail, slot(type, rank, 1), posts << 1 | (meta.fresh ? 1u : 0u));
  const uint32_t compute = std::min(meta.compute_us, RankMeta::kMaxComputeUs);
  const uint32_t measured =
      static_cast<uint32_t>(std::clamp(meta.measured, 0, RankMeta::kMaxMeasured));
  store_word(type, tail, slot(type, rank, 2), compute << 6 | measured);
}

RankMeta read_rank_meta(const void* tail, DataType type, int size, int rank) {
  RankMeta m;
  if (rank < 0 || rank >= size || tail == nullptr) return m;
  const uint32_t age1 = load_word(type, tail, slot(type, rank, 0));
  const uint32_t w = load_word(type, tail, slot(type, rank, 1));
  m.age = static_cast<int>(std::min<uint32_t>(age1, 0x7fffffffu)) - 1;
  m.fresh = (w & 1u) != 0;
  m.posts = static_cast<int>(w >> 1);
  const uint32_t c = load_word(type, tail, slot(type, rank, 2));
  m.compute_us = c >> 6;
  m.measured = static_cast<int>(c & 63u);
  return m;
}

}  // namespace eagercomm::detail
