// Internal: constructors of the collective state machines. Not installed.
//
// The algorithm is chosen on the calling thread (it depends only on the arguments, the
// communicator size and the configuration) and recorded in the signature, so that ranks
// configured differently detect it instead of running incompatible protocols.
#pragma once

#include <memory>
#include <vector>

#include "collectives/engine/op.h"

namespace eagercomm::detail {

enum class Algo : uint8_t {
  kLocal = 1,              // one rank: a copy
  kRecursiveDoubling = 2,  // allreduce, one slot per message
  kRing = 3,               // allreduce (reduce-scatter + allgather), allgather
  kTree = 4,               // broadcast, binomial tree
  kChain = 5,              // broadcast, pipelined chain
  kDissemination = 6,      // barrier
  kDirect = 7,             // allreduce, loads and stores in peers' buffers (shared address space)
  kSmall = 8,              // allreduce, one exchange through per-pair boxes (small_boxes.h)
};

std::shared_ptr<Op> make_ring_allreduce(OpSignature sig, const void* in, void* out);
std::shared_ptr<Op> make_rd_allreduce(OpSignature sig, const void* in, void* out);
std::shared_ptr<Op> make_direct_allreduce(OpSignature sig, const void* in, void* out);
std::shared_ptr<Op> make_small_allreduce(OpSignature sig, const void* in, void* out);
// Makes a finished small allreduce (nobody else referencing it) new for another call.
void rearm_small_allreduce(Op& op, OpSignature sig, const void* in, void* out);
// The same exchange for round `round` of a partial allreduce, in place on `buffer`, through the
// object's own `boxes` (numbered by round), each store carrying `mark` (partial_stream.h). Its
// stores wake the peers through the transport (an idle engine sleeps there, not on the boxes).
std::shared_ptr<Op> make_round_allreduce(OpSignature sig, void* buffer, SmallBoxes* boxes,
                                         uint64_t round, uint32_t mark);
std::shared_ptr<Op> make_broadcast(OpSignature sig, void* buf);  // tree or chain per sig
std::shared_ptr<Op> make_ring_allgather(OpSignature sig, const void* in, void* out);
std::shared_ptr<Op> make_barrier(OpSignature sig);

// The allreduce algorithm for `bytes` at `size` ranks under `config`, given the mailbox payload
// capacity, whether the transport maps peers' memory, and the largest contribution the
// communicator's small boxes take (0: it has none). Deterministic: ranks configured alike agree.
Algo choose_allreduce(const Config& config, int size, size_t bytes, size_t payload_capacity,
                      bool maps_peer_memory, size_t small_max_bytes);
// The largest allreduce `auto` runs by recursive doubling at `size` ranks (one slot at most).
// EAGERCOMM_RD_MAX_BYTES is the crossover measured with up to 8 ranks; above 8 the ring pays
// 2 (P-1) latencies against recursive doubling's log2 P, and the crossover grows with that
// difference at a constant number of bytes per latency: rd_max x (2 (P-1) - log2 P) / 11, 11
// being the difference at P = 8 (the simulation, eagercomm-sim, found a 4 KiB solo round at
// P = 1024 taking 3 ms in a ring of 2046 steps instead of 20 us).
size_t rd_max_bytes_at(const Config& config, int size);
// The allreduce state machine named by sig.reserved (an Algo).
std::shared_ptr<Op> make_allreduce(OpSignature sig, const void* in, void* out);

// Recursive doubling over any P (allreduce_rd.cc): the real rank of doubling rank `pn` when the
// first 2 * `rem` ranks were folded into pairs.
inline int rd_real_rank(int pn, int rem) { return pn < rem ? pn * 2 + 1 : pn + rem; }

// Every peer that an algorithm run over the mailbox may send a payload to or receive one from,
// sorted: the ring and chain neighbours (r +- 1), the trees and the dissemination barrier
// (r +- 2^k, over every root) and the recursive-doubling partners, folded pairs included (the
// activation flood sends headers only, which any peer's control slots take). The relation is
// symmetric. Algorithms that talk to every peer (direct allreduce, small boxes) do not go through
// the mailbox slots this decides.
std::vector<int> data_partners(int rank, int size);

// A protocol error about a message of `op` from `peer`.
Status bad_message(const Op& op, int peer, const char* what);

}  // namespace eagercomm::detail
