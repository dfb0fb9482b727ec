#include "collectives/partial/flood_order.h"

#include <cstddef>

namespace eagercomm::detail {
namespace {

// x in base 4 with digits -1, 0, 1, 2: how many are not 0, and the level of the lowest that is
// not (x != 0).
int nonzero_digits(long long x) {
  int n = 0;
  while (x != 0) {
    long long r = x % 4;
    if (r < 0) r += 4;
    if (r == 3) r = -1;
    n += r != 0;
    x = (x - r) / 4;
  }
  return n;
}

int lowest_digit_level(long long x) {
  int level = 0;
  for (; x % 4 == 0; x /= 4) ++level;
  return level;
}

}  // namespace

FloodOrder::FloodOrder(int size) : size_(size) {
  long long span = 1;  // 4^levels
  for (; span < size; span *= 4) ++levels_;
  top_ = 2 * (span - 1) / 3;
  bottom_ = -(span - 1) / 3;
  // Highest level first, digits 1, 2, -1 within one. Two strides of one world can name the same
  // peer (2 4^i and -4^i when P = 3 4^i): the first is kept.
  std::vector<bool> seen(static_cast<size_t>(size > 0 ? size : 1), false);
  long long base = span / 4;
  for (int level = levels_ - 1; level >= 0; --level, base /= 4) {
    for (const long long digit : {1LL, 2LL, -1LL}) {
      if (digit * base >= size) continue;
      const int peer = static_cast<int>(((digit * base) % size + size) % size);
      if (seen[static_cast<size_t>(peer)]) continue;
      seen[static_cast<size_t>(peer)] = true;
      all_.push_back({static_cast<int>(digit * base), peer, level});
    }
  }
}

long long FloodOrder::tree_value(long long offset) const {
  // An offset has one or two values in [bottom_, top_] (itself, and itself - P when that is in
  // range too): the one with fewer non-zero digits (fewer hops from the root), the offset itself
  // on a tie.
  const long long low = offset - size_;
  if (offset > top_) return low;
  if (low < bottom_) return offset;
  return nonzero_digits(low) < nonzero_digits(offset) ? low : offset;
}

int FloodOrder::strides(int offset, Strides* out) const {
  const long long x = tree_value(offset);
  // The level of x's lowest non-zero digit: its children are below it.
  const int parent_level = x == 0 ? levels_ : lowest_digit_level(x);
  const auto child = [&](const Stride& s) {
    if (s.level >= parent_level) return false;
    const long long y = x + s.stride;  // a child only if that is the value its offset takes
    if (y < bottom_ || y > top_) return false;
    const long long y_offset = ((y % size_) + size_) % size_;
    return tree_value(y_offset) == y;
  };
  int n = 0;
  for (const Stride& s : all_) {
    if (child(s)) (*out)[n++] = s.peer;
  }
  for (const Stride& s : all_) {
    if (!child(s)) (*out)[n++] = s.peer;
  }
  return n;
}

}  // namespace eagercomm::detail
