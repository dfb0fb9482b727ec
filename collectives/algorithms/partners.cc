// Which peers the mailbox algorithms exchange payloads with (algorithms.h: data_partners).
// Kept next to the algorithms: a new algorithm that sends to another peer must add it here, or
// its sends fail on the control slots (mailbox.h) instead of corrupting anything.
#include <algorithm>

#include "collectives/algorithms/algorithms.h"

namespace eagercomm::detail {

std::vector<int> data_partners(int rank, int size) {
  std::vector<int> out;
  if (size < 2) return out;
  // Ring, chain (d = 1); binomial trees from any root, dissemination barrier; the partial
  // rounds' activation flood (strides 4^i, 2 4^i, -4^i: flood_order.h).
  for (int d = 1; d < size; d *= 2) {
    out.push_back((rank + d) % size);
    out.push_back((rank - d + size) % size);
  }
  // Recursive doubling: the fold of the first 2 * rem ranks (r +- 1, above), then the doubling
  // among the p2 ranks that remain.
  int p2 = 1;
  while (p2 * 2 <= size) p2 *= 2;
  const int rem = size - p2;
  const bool even_folded = rank < 2 * rem && rank % 2 == 0;  // sends to rank + 1, then waits
  if (!even_folded) {
    const int newrank = rank < 2 * rem ? rank / 2 : rank - rem;
    for (int mask = 1; mask < p2; mask <<= 1) out.push_back(rd_real_rank(newrank ^ mask, rem));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  std::erase(out, rank);
  return out;
}

}  // namespace eagercomm::detail
