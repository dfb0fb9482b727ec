// The link model of the simulated network (transport/sim/): LogGP (Alexandrov et al., "LogGP:
// Incorporating Long Messages into the LogP Model", SPAA'95).
//
// A message of k bytes from s to d costs the sender's CPU o, leaves s's NIC at least g after the
// previous one and takes k G to serialize; it reaches d after L, where d's NIC serializes the
// messages it receives one after another (k G each), and costs d's CPU o before d can act on it.
// A notification (no bytes) costs o at both ends and L, and queues behind nothing but earlier
// messages of the same pair (per-pair order). Write completions (the acknowledgement, L after
// the delivery) cost nothing.
// Taking data in costs the receiver `reduce` per byte (the collectives combine what they
// receive, or copy it on: the ring's allgather half), when its runtime hands the payload to the
// operation that does so (Transport::took_in), not when it arrives: a message for a round the
// rank has not entered waits unreduced while the rank enters the round. The presets are round
// figures, not measurements of one system:
//   hdr: HDR InfiniBand, 200 Gb/s: G = 0.04 ns/B (25 GB/s); L = 1.0 us, o = 0.2 us, g = 5 ns
//        (ConnectX-6 data sheet: 200 Gb/s, 215 million messages/s; osu_latency ~1 us between
//        two HDR hosts through one switch);
//   ndr: NDR InfiniBand, 400 Gb/s: G = 0.02 ns/B (50 GB/s); L = 0.9 us, o = 0.15 us, g = 3 ns
//        (ConnectX-7: 400 Gb/s, 330 million messages/s).
// `reduce` defaults to 0.1 ns/B (a sum at 10 GB/s of input on one core).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/status.h"

namespace eagercomm::sim {

struct LogGP {
  double L_ns = 1000;
  double o_ns = 200;
  double g_ns = 5;
  double G_ns_per_byte = 0.04;
  double reduce_ns_per_byte = 0.1;

  // k bytes on the wire.
  double wire_ns(uint64_t bytes) const { return static_cast<double>(bytes) * G_ns_per_byte; }
  std::string describe() const;
};

// "hdr" or "ndr"; kInvalidArgument naming the presets otherwise.
Result<LogGP> loggp_preset(std::string_view name);
// A preset's name, or the parameters of a measured link: "L=NS,o=NS,g=NS,bw=GBPS[,reduce=GBPS]"
// (times in ns, bandwidths in GB/s; keys in any order, L, o, g and bw required), e.g. what
// sim/cross_validate.sh measures on shm. kInvalidArgument naming the accepted forms otherwise.
Result<LogGP> loggp_parse(std::string_view spec);

}  // namespace eagercomm::sim
