// The IP address rdma_cm listens on and connects from: the one bound to the transport's RDMA
// device and port (IPoIB on InfiniBand, the netdev's address on RoCE). verbs_connect.h uses it
// to decide whether this rank offers the cm path (EAGERCOMM_IB_CONNECT=auto: only with one).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

namespace eagercomm::verbs {

// An address of this host and the RDMA device / port that rdma_bind_addr() tied it to.
struct IpCandidate {
  std::string interface;         // "ib0", "enp65s0f0np0"
  uint8_t family = 4;            // 4 or 6
  std::array<uint8_t, 16> ip{};  // IPv4 in the first 4 bytes
  std::string device;            // "" when no RDMA device owns the address
  uint8_t port = 0;
};

struct CmAddress {
  bool found = false;
  uint8_t family = 0;
  std::array<uint8_t, 16> ip{};
  std::string interface;
  std::string why_none;           // when !found
  std::string to_string() const;  // "10.0.0.7 (ib0)"
};

// The first IPv4 address owned by `device` / `port`, else its first global IPv6 address
// (link-local IPv6 would need a scope that does not travel between hosts). Pure: tested with
// described candidates.
CmAddress choose_cm_address(std::span<const IpCandidate> candidates, const std::string& device,
                            uint8_t port);

// Lists this host's addresses (getifaddrs) and asks rdma_cm which device and port each belongs
// to, then chooses as above. Never fails: the reason is in why_none. Through the system's
// rdma-core, or the table given (loopback addresses count only where the table says its device
// has one: the emulated device).
CmAddress find_cm_address(const std::string& device, uint8_t port);
struct VerbsApi;
CmAddress find_cm_address(const VerbsApi& api, const std::string& device, uint8_t port);

}  // namespace eagercomm::verbs
