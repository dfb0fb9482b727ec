#include "collectives/partial/partial_meta.h"

#include <algorithm>

#include "collectives/kernels/element_value.h"

namespace eagercomm::detail {
namespace {

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

// Word `word` (0: the basic section, 1: the adaptive one) of `rank`: sections of one word per
// rank, one after the other.
size_t slot(DataType type, int size, int rank, int word) {
  return (static_cast<size_t>(word) * static_cast<size_t>(size) + static_cast<size_t>(rank)) *
         static_cast<size_t>(digits(type));
}

}  // namespace

size_t meta_elements(DataType type, int size, bool compute) {
  return static_cast<size_t>(std::max(size, 0)) * (compute ? 2 : 1) *
         static_cast<size_t>(digits(type));
}

void write_rank_meta(void* tail, DataType type, int size, int rank, const RankMeta& meta,
                     bool compute) {
  if (rank < 0 || rank >= size) return;
  const uint32_t age1 =
      meta.age < 0 ? 0u : static_cast<uint32_t>(std::min(meta.age, RankMeta::kMaxAge) + 1);
  const uint32_t posts = static_cast<uint32_t>(std::clamp(meta.posts, 0, RankMeta::kMaxPosts));
  store_word(type, tail, slot(type, size, rank, 0),
             age1 << 16 | posts << 1 | (meta.fresh ? 1u : 0u));
  if (!compute) return;
  const uint32_t us = std::min(meta.compute_us, RankMeta::kMaxComputeUs);
  const uint32_t measured =
      static_cast<uint32_t>(std::clamp(meta.measured, 0, RankMeta::kMaxMeasured));
  store_word(type, tail, slot(type, size, rank, 1), us << 6 | measured);
}

RankMeta read_rank_meta(const void* tail, DataType type, int size, int rank, bool compute) {
  RankMeta m;
  if (rank < 0 || rank >= size || tail == nullptr) return m;
  const uint32_t w = load_word(type, tail, slot(type, size, rank, 0));
  m.age = static_cast<int>(w >> 16) - 1;
  m.posts = static_cast<int>((w >> 1) & 0x7fffu);
  m.fresh = (w & 1u) != 0;
  if (!compute) return m;
  const uint32_t c = load_word(type, tail, slot(type, size, rank, 1));
  m.compute_us = c >> 6;
  m.measured = static_cast<int>(c & 63u);
  return m;
}

}  // namespace eagercomm::detail
