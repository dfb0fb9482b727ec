// Internal: the order of a partial round's activation flood (partial_stream.h). Not installed.
//
// Every rank that enters a round sends an activation to rank + s (mod P) for every stride s of
// the form j 4^i < P, j = 1, 2, 3 (3 ceil(log4 P) strides at most): the activated set is closed
// under those edges, so several initiators of one round are harmless. The sends go out in the
// order of a 4-nomial tree rooted at whoever set the round off (the activation carries that
// rank): the rank at offset d from the root, whose lowest non-zero base-4 digit is at level i,
// first sends to its children d + j 4^l (l < i, highest level first, inside the P ranks), then
// the rest; the root's children are every stride. The last rank then hears after ceil(log4 P)
// hops of L + 2o plus the o of at most two sends queued ahead at each hop. (The tree follows from
// the root, not from the stride a rank heard over first: with P not a power of 4, wrapped sends
// reach some ranks first over a stride that is not their parent's, and taking that as the
// parent's put the last rank at 8.0 instead of at most 7.2 us at P = 132 in the LogP model of
// partial_allreduce_test's FloodOrder case.)
//
// Why radix 4 and not the binomial tree of strides 2^k: a hop costs L + 2o and a further send
// from the same rank only o, so a tree whose ranks send to three children per level beats one
// that halves the remaining ranks per hop whenever L > 0: log4 P (L + 4o) against log2 P (L + 2o).
// With the HDR preset (L = 1 us, o = 0.2 us) that is 9.0 us against 14.1 us at P = 1024, inside
// issue 21's (log2 P + 1) L = 11 us, which no tree of 2^k strides (either sign) that hands each
// child a contiguous range meets: the best such tree takes 12.8 us there. Radix 5 or 6 gain a few
// percent more in that model and cost more strides outside the 2^k set that the collectives'
// partners already are (the 3 4^i), so 4 it is.
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
    int stride;
    int level;
  };
  std::vector<Stride> all_;  // highest level first, j ascending within a level
  int size_;
  int levels_ = 0;
};

}  // namespace eagercomm::detail
