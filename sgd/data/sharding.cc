#include "sgd/data/sharding.h"

#include <numeric>
#include <random>
#include <utility>

#include "sgd/data/random.h"
#include "sgd/sgd_log.h"

namespace eagercomm::sgd {

std::vector<size_t> epoch_permutation(size_t n, uint64_t seed, uint64_t epoch) {
  std::vector<size_t> perm(n);
  std::iota(perm.begin(), perm.end(), size_t{0});
  // (seed, epoch) are mixed first: mt19937_64 seeded with neighbouring integers would start
  // from related states.
  std::mt19937_64 rng(detail::mix_seed(seed, epoch));
  for (size_t i = n; i > 1; --i) {
    const size_t j = static_cast<size_t>(detail::uniform_below(rng, i));
    std::swap(perm[i - 1], perm[j]);
  }
  return perm;
}

size_t shard_size(size_t n, int size) { return size < 1 ? 0 : n / static_cast<size_t>(size); }

std::vector<size_t> epoch_shard(size_t n, int rank, int size, uint64_t seed, uint64_t epoch) {
  if (size < 1 || rank < 0 || rank >= size) {
    EC_ERROR(kSgd, "epoch_shard: rank %d of %d is not a rank of the job; empty shard", rank, size);
    return {};
  }
  const size_t k = shard_size(n, size);
  const std::vector<size_t> perm = epoch_permutation(n, seed, epoch);
  const auto first = perm.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(rank) * k);
  return std::vector<size_t>(first, first + static_cast<std::ptrdiff_t>(k));
}

}  // namespace eagercomm::sgd
