// Internal: a round's per-rank metadata (fresh, age, posts, compute time) travels in the tail of
// the round's own data allreduce instead of a second collective. Not installed.
//
// Every rank writes its values into its own slots of the tail and leaves every other slot zero,
// so the sum the allreduce computes is each rank's values, unchanged: x + 0 is exact in every
// type. The values are split into digits small enough that every DataType holds them exactly
// (bf16 holds the integers up to 256), so no type's rounding can alter them.
//
// Layout: one 32-bit word per rank (age + 1 in 16 bits, posts in 15, fresh in 1), then, for
// adaptive objects only, a second section of one word per rank (compute time in 26 bits, measured
// posts in 6). deadline(auto) objects have the second section too: the round's coordinator puts
// its arrival spread in its slot's time, with `measured` 1 (deadline_tuner.h). A word takes 8 bytes
// in every type (two float32 elements of 16-bit digits, four bf16 ones of 8 bits, ...), so a round
// carries 8 bytes per rank (16 adaptive), where three words per rank for every mode made 24: the
// tail is O(P) in every message of every round, and at P = 1024 it was 24 KiB against 4 KiB of data
// (bench/RESULTS.md, "Activation latency").
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
  // (adaptive_regime.h). Carried by adaptive objects only.
  uint32_t compute_us = 0;
  int measured = 0;
  // Every value is kept to these (clamped, never wrapped). A rank's contribution enters the
  // next round it takes part in, so ages stay near the result depth and posts per round near
  // one; the limits only keep absurd values from reading as small ones.
  static constexpr int kMaxAge = 0xfffe;
  static constexpr int kMaxPosts = 0x7fff;
  static constexpr uint32_t kMaxComputeUs = (1u << 26) - 1;  // 67 s
  static constexpr int kMaxMeasured = 63;
};

// Elements of `type` the tail takes for `size` ranks (`compute`: with the adaptive section).
size_t meta_elements(DataType type, int size, bool compute);

// Writes `rank`'s values into the tail that starts at `tail` (zero everywhere else).
void write_rank_meta(void* tail, DataType type, int size, int rank, const RankMeta& meta,
                     bool compute);

// Reads `rank`'s values back from a summed tail (compute_us and measured only when `compute`;
// zero otherwise).
RankMeta read_rank_meta(const void* tail, DataType type, int size, int rank, bool compute);

}  // namespace eagercomm::detail
