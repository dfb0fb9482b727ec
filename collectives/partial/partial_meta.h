// Internal: a round's per-rank metadata (fresh, age, posts, compute time) travels in the tail of
// the round's own data allreduce instead of a second collective. Not installed.
//
// Every rank writes its values into its own slots of the tail and leaves every other slot zero,
// so the sum the allreduce computes is each rank's values, unchanged: x + 0 is exact in every
// type. The values are split into digits small enough that every DataType holds them exactly
// (bf16 holds the integers up to 256), so no type's rounding can alter them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/dtype.h"

namespace eagercomm::detail {

struct RankMeta {
  bool fresh = false;  // the contribution held a post meant for the round
  int age = -1;        // rounds since the oldest post it holds was meant; -1: no data
  int posts = 0;       // posts folded into it
  // The application's time outside this object's calls before `measured` of those posts
  // (computing its gradients), summed, in microseconds; what adaptive rounds decide from
  // (adaptive_regime.h). Kept to kMaxComputeUs and kMaxMeasured (clamped, never wrapped).
  uint32_t compute_us = 0;
  int measured = 0;
  static constexpr uint32_t kMaxComputeUs = (1u << 26) - 1;  // 67 s
  static constexpr int kMaxMeasured = 63;
};

// Elements of `type` the tail takes for `size` ranks.
size_t meta_elements(DataType type, int size);

// Writes `rank`'s values into the tail that starts at `tail` (zero everywhere else).
void write_rank_meta(void* tail, DataType type, int size, int rank, const RankMeta& meta);

// Reads `rank`'s values back from a summed tail.
RankMeta read_rank_meta(const void* tail, DataType type, int size, int rank);

}  // namespace eagercomm::detail
