// What verbs ranks tell each other through the bootstrap store: a rank's address (port, LID,
// GID, its rdma_cm endpoint or else the queue pair it made for each peer) and remote keys of
// registered memory.
//
// This is the store-based connection set-up (the fallback the issue names next to rdma_cm):
// QP numbers, LID/GID and PSNs travel through the store, then each side moves its QP for the
// peer to RTR/RTS with what the peer published. Everything a peer sends is checked before use:
// format (magic, version, exact length), identity (rank, transport instance, job size), ranges
// (24-bit QP numbers and PSNs, ports from 1, MTU one of 256..4096) and a checksum. The decoders
// never read past the blob and never trust a length field they did not check.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/status.h"

namespace eagercomm::verbs {

inline constexpr uint32_t kMaxQpNumber = 0xffffff;  // QP numbers and PSNs are 24 bits
inline constexpr uint32_t kMaxPsn = 0xffffff;

struct QpEntry {
  uint32_t qpn = 0;  // the QP the publishing rank made for that peer (0 for itself)
  uint32_t psn = 0;  // its first send PSN
};

struct QpAddress {
  int32_t rank = 0;
  uint32_t job_size = 0;  // the world size of the publishing rank
  uint64_t instance = 0;  // random per transport: keys must come from the instance we connected to
  uint8_t link = 0;       // LinkLayer
  uint8_t port = 1;
  uint16_t lid = 0;
  uint32_t mtu = 1024;  // active MTU in bytes; the pair uses the smaller of the two
  bool use_gid = false;
  uint8_t gid_index = 0;
  bool gid_roce_v2 = false;  // the GID's type: RoCE v2 (UDP/IP) rather than v1 / IB; must match
  std::array<uint8_t, 16> gid{};
  // Where peers write how many receives we posted for them (ReturnCredits): an array of one
  // 64-bit word per rank in memory registered for remote write.
  uint64_t credit_addr = 0;
  uint32_t credit_rkey = 0;
  // The rdma_cm endpoint this rank listens on (verbs_connect.h), when it offers the cm path:
  // family 4 (IPv4, the address in ip[0..3]) or 6, and a port that is not 0. Without it all
  // three are 0 and the pair uses the store path.
  bool offers_cm = false;
  uint8_t cm_family = 0;
  std::array<uint8_t, 16> cm_ip{};
  uint16_t cm_port = 0;  // host byte order
  // The store path's: one per rank of the job, indexed by rank. Empty with rdma_cm (queue pairs
  // are then made on demand and their numbers travel in the CM exchange); encode_address()
  // writes them only without offers_cm.
  std::vector<QpEntry> qps;
};

std::vector<uint8_t> encode_address(const QpAddress& a);
// Checks everything above; `what` names the blob in errors ("address of rank 3").
Result<QpAddress> decode_address(std::span<const uint8_t> blob, int expected_rank, int job_size);

// The private data of an rdma_cm connect request and its reply: who is calling whom, and which
// transport instance, so the passive side ties the request to the right peer's QP and neither
// side trusts a connection from another job or an earlier transport. The CM pads private data
// to its fixed size with zeros, so the decoder takes a longer blob when the rest is zero.
struct CmHello {
  int32_t from = 0;
  int32_t to = 0;
  uint64_t instance = 0;  // the sender's transport instance
};
inline constexpr size_t kCmHelloBytes = 32;  // within the 56 bytes an RC connect request carries

std::vector<uint8_t> encode_hello(const CmHello& h);
// Checks format, checksum, that `to` is `expected_to` and that `from` is another rank of a job of
// `job_size`.
Result<CmHello> decode_hello(std::span<const uint8_t> blob, int expected_to, int job_size);

// kCuda: GPU memory the NIC reaches directly (GPUDirect RDMA); kCudaStaged: GPU memory whose owner
// could only register a pinned host copy (no GPUDirect there), which peers cannot write into.
enum class KeyKind : uint8_t { kHost = 0, kCuda = 1, kCudaStaged = 2 };

struct RegionKey {
  int32_t owner = 0;
  uint64_t instance = 0;
  uint64_t addr = 0;
  uint64_t length = 0;
  uint32_t rkey = 0;
  KeyKind kind = KeyKind::kHost;
};

std::vector<uint8_t> encode_key(const RegionKey& k);
Result<RegionKey> decode_key(std::span<const uint8_t> blob, int expected_owner,
                             uint64_t expected_instance);

}  // namespace eagercomm::verbs
