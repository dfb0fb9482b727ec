// Per-epoch sharding of a data set over the ranks of a data-parallel job.
//
// Every rank draws the same permutation of the sample ids from (seed, epoch), with no
// communication, and takes its own contiguous block of it. Shares are equal: each rank gets
// floor(n / size) samples and the last n mod size ids of the permutation sit out the epoch.
// A trainer needs that: with equal shares every rank runs the same number of steps per epoch,
// so the collectives of one step match up across ranks. The dropped ids differ from epoch to
// epoch, so no sample is left out for good.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace eagercomm::sgd {

// A permutation of 0..n-1 that depends only on (seed, epoch): the same on every rank, host,
// compiler and standard library (mt19937_64 and our own unbiased Fisher-Yates, not
// std::shuffle, whose result is implementation-defined).
std::vector<size_t> epoch_permutation(size_t n, uint64_t seed, uint64_t epoch);

// Samples per rank and epoch: n / size (0 when size < 1).
size_t shard_size(size_t n, int size);

// Rank `rank`'s sample ids for `epoch`: entries [rank * k, (rank + 1) * k) of
// epoch_permutation(n, seed, epoch), k = shard_size(n, size). The shares of the ranks are
// disjoint and equal. Requires 1 <= size and 0 <= rank < size; otherwise the result is empty
// (and an error is logged), which a trainer sees as an epoch of zero steps.
std::vector<size_t> epoch_shard(size_t n, int rank, int size, uint64_t seed, uint64_t epoch);

}  // namespace eagercomm::sgd
