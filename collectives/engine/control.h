// Internal: the control notifications communicators exchange besides operation messages (a
// mailbox control code: 28 bits, kind in bits 27..24, argument in bits 23..0). Not installed.
#pragma once

#include <cstdint>
#include <string>

namespace eagercomm::detail {

enum class ControlKind : uint32_t {
  kPeerExit = 1,   // argument: the first collective the sender will not run
  kHeartbeat = 2,  // argument: how many collectives the sender has begun
  kEvicted = 3,    // the sender declared the receiver hung; argument: seconds it heard nothing
  kHung = 4,       // a rank watching rank `argument` declared it hung; passed on to partners
  // Rank `argument` left (destroyed its communicator): a leaver's exit passed down the exit
  // tree (CommCore::send_exit_tree), always followed by kLeftFrom from the same sender.
  kLeftRank = 5,
  kLeftFrom = 6,  // argument: the first collective the leaver named by kLeftRank will not run
};

inline uint32_t control_word(ControlKind kind, uint64_t arg) {
  return (static_cast<uint32_t>(kind) << 24) | static_cast<uint32_t>(arg & 0xffffffu);
}
inline ControlKind control_kind(uint32_t word) { return static_cast<ControlKind>(word >> 24); }
inline uint32_t control_arg(uint32_t word) { return word & 0xffffffu; }

// "#12": a collective's sequence number as errors and logs name it.
inline std::string seq_text(uint64_t seq) { return "#" + std::to_string(seq); }

}  // namespace eagercomm::detail
