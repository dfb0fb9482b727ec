// Internal: the order of a partial round's activation flood (partial_stream.h). Not installed.
//
// Every rank that enters a round sends an activation to rank + s (mod P) for every stride s of
// the form d 4^i, d = 1, 2, -1, 4^i < P (3 ceil(log4 P) strides at most, fewer where two name
// the same peer): the activated set is closed under those edges, so several initiators of one
// round are harmless. The strides are +-2^k, data partners of every rank (data_partners()), so
// activations need no connection beyond those the collectives make (issue 21; the digits were
// 1, 2, 3 until 2026-12-07, and the 3 4^i added 2 ceil(log4 P) connections per rank: 27 at
// P = 1024 against the 2 log2 P + 4 = 24).
//
// The sends go out in the order of a tree rooted at whoever set the round off (the activation
// carries that rank): an offset d from the root is the value x of [-(4^n - 1) / 3,
// 2 (4^n - 1) / 3] (n = ceil(log4 P)) with x = d mod P written with the fewest non-zero digits
// -1, 0, 1, 2 in base 4 (d itself on a tie); its children are x + d' 4^l for every level l below
// its lowest non-zero digit that are the values their offsets take, and it sends to them first
// (highest level first), then the rest. The last rank then hears after ceil(log4 P) hops of
// L + 2o plus the o of at most two sends queued ahead at each hop (partial_allreduce_test's
// FloodOrder case checks every P up to 600 in the LogP model). (The tree follows from the root,
// not from the stride a rank heard over first: with P not a power of 4, wrapped sends reach
// some ranks first over a stride that is not their parent's, and taking that as the parent's
// put the last rank at 8.0 instead of at most 7.2 us at P = 132.) Choosing the value with fewer
// digits matters: taking d itself whenever it is in range left ranks whose parent's value was
// not its offset's, reached a hop late (P = 13, 52, 61 broke the bound).
//
// Why radix 4 and not the binomial tree of strides 2^k: a hop costs L + 2o and a further send
// from the same rank only o, so a tree whose ranks send to three children per level beats one
// that halves the remaining ranks per hop whenever L > 0: log4 P (L + 4o) against log2 P (L + 2o).
// With the HDR preset (L = 1 us, o = 0.2 us) that is 9.0 us against 14.1 us at P = 1024, inside
// issue 21's (log2 P + 1) L = 11 us, which no tree of 2^k strides (either sign) that hands each
// child a contiguous range meets: the best such tree takes 12.8 us there. Radix 5 or 6 gain a few
// percent more in that model and have digits that are not +-2^k, so 4 it is.
#pragma once

#include <array>
#include <vector>

namespace eagercomm::detail {

class FloodOrder {
 public:
  static constexpr int kMaxStrides = 3 * 16;  // P < 2^32
  using Strides = std::array<int, kMaxStrides>;

  explicit FloodOrder(int size);

  // Fills `out` with the strides to send, in order, for the rank at `offset` = (rank - root) mod
  // P from the rank that set the round off; returns how many (every stride, once).
  int strides(int offset, Strides* out) const;
  // The tree's depth: ceil(log4 P) (0 for P = 1).
  int levels() const { return levels_; }

 private:
  struct Stride {
    int stride;  // d 4^level, signed
    int peer;    // stride mod P: what strides() hands out
    int level;
  };
  // The tree's name for `offset` (see above).
  long long tree_value(long long offset) const;

  std::vector<Stride> all_;  // highest level first; d = 1, 2, -1 within a level
  int size_;
  int levels_ = 0;
  long long top_ = 0;     // 2 (4^n - 1) / 3: the largest value n digits reach
  long long bottom_ = 0;  // -(4^n - 1) / 3: the smallest
};

}  // namespace eagercomm::detail
