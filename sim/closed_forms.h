// LogGP closed forms of the allreduce algorithms (Thakur, Rabenseifner and Gropp, "Optimization
// of Collective Communication Operations in MPICH", IJHPCA 2005, in LogGP terms: a step costs
// alpha = L + 2o, a byte G on the wire and `reduce` (gamma) to take in at the receiver, which
// here also stands for the copy of the allgather half: the ring stores every chunk it receives
// into the next slot or the output), against which the simulation of the real state machines is
// checked (eagercomm-sim, sim_test). Steps are not pipelined in these forms; the ring pipelines
// chunks of one segment when it takes several slots, so small P and large n come out below.
#pragma once

#include <cstddef>

#include "transport/sim/loggp.h"

namespace eagercomm::sim {

// Ring (reduce-scatter + allgather), n bytes over P ranks (s = 2 (P-1) steps):
//   s alpha + 2 (P-1)/P n (G + reduce) + (s - 1) o.
double ring_allreduce_ns(const LogGP& m, int P, size_t bytes);
// Recursive doubling, with the fold of the ranks above the largest power of two p2 (two steps
// more when P is not one; an upper bound then, since the ranks that are not folded send their
// first message at once):
//   s (alpha + n (G + reduce)) + (s - 1) o,   s = log2 p2 [+ 2].
// In both, the last term is the slot credit every message returns (a notification of the
// mailbox): it costs o at the rank that took the message in, before its next step.
double rd_allreduce_ns(const LogGP& m, int P, size_t bytes);

}  // namespace eagercomm::sim
