#include "collectives/partial/flood_order.h"

namespace eagercomm::detail {

FloodOrder::FloodOrder(int size) : size_(size) {
  std::vector<std::vector<Stride>> by_level;
  for (long long base = 1; base < size; base *= 4) {
    std::vector<Stride> strides;
    for (long long j = 1; j <= 3 && j * base < size; ++j) {
      strides.push_back({static_cast<int>(j * base), levels_});
    }
    by_level.push_back(std::move(strides));
    ++levels_;
  }
  // Highest level first; within one, the smaller j first: the subtrees are equal, except at
  // the top level, where the larger j may be cut short by P.
  for (auto it = by_level.rbegin(); it != by_level.rend(); ++it) {
    all_.insert(all_.end(), it->begin(), it->end());
  }
}

int FloodOrder::strides(int offset, Strides* out) const {
  // The level of the offset's lowest non-zero base-4 digit: its children are below it.
  int parent_level = levels_;
  if (offset > 0) {
    parent_level = 0;
    for (int d = offset; d % 4 == 0; d /= 4) ++parent_level;
  }
  const auto child = [&](const Stride& s) {
    return s.level < parent_level && static_cast<long long>(offset) + s.stride < size_;
  };
  int n = 0;
  for (const Stride& s : all_) {
    if (child(s)) (*out)[n++] = s.stride;
  }
  for (const Stride& s : all_) {
    if (!child(s)) (*out)[n++] = s.stride;
  }
  return n;
}

}  // namespace eagercomm::detail
