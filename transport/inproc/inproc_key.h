// The `inproc` transport's blobs (inproc_transport.h), as pure functions so that they can be
// fuzzed and unit-tested without a fabric: the remote key of a region, a rank's address, and the
// fabric record rank 0 publishes in the store. Every input comes from a peer (through the store)
// and is checked here before the transport looks anything up with it.
//
// Remote key layout (host byte order: every reader is in the same process), 40 bytes:
//   u32 magic "ECIP" | i32 owner rank | u64 fabric id | u64 block id | u64 size | u8 version |
//   u8 memory kind | 6 bytes reserved
// The kind is not checked here: it must agree with the block the key names, which only the
// fabric knows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/status.h"

namespace eagercomm {

inline constexpr size_t kInprocKeyBytes = 40;

struct InprocKey {
  int32_t owner = -1;
  uint64_t fabric_id = 0;
  uint64_t block_id = 0;
  uint64_t size = 0;
  uint8_t kind = 0;  // MemoryKind, checked against the block by the transport

  std::vector<uint8_t> pack() const;
  // Checks the length, the magic, that the key is of fabric `fabric_id` and owned by `peer`, and
  // the version. kProtocolError when not.
  static Result<InprocKey> unpack(std::span<const uint8_t> blob, int peer, uint64_t fabric_id);
};

// A rank's address: its rank number (the fabric holds everything else).
std::vector<uint8_t> inproc_address(int32_t rank);
// kProtocolError unless `address` is exactly inproc_address(peer).
Status inproc_check_address(std::span<const uint8_t> address, int peer);

// "<pid>:<fabric id>", published by rank 0 under `<scope>/inproc/fabric`.
struct InprocFabricRecord {
  long pid = 0;
  unsigned long long fabric_id = 0;
};
std::string inproc_fabric_record(const InprocFabricRecord& record);
// kProtocolError when `value` does not start with two numbers separated by ':'.
Result<InprocFabricRecord> inproc_parse_fabric_record(const std::string& value);

}  // namespace eagercomm
