// The header at the start of every shm segment (shm_segment.h), as pure functions so that the
// check an importer makes can be fuzzed and unit-tested without shared memory. The creator
// writes the header before it publishes the segment's key; an importer maps the segment by the
// name in the key and accepts it only if the header agrees with the key, so a stale segment of
// an earlier run, or a forged key, is refused before anything in the payload is read.
//
// Layout (host byte order: creator and importer are on one host), 40 bytes at offset 0:
//   u64 magic "ECOMSHM1" | u32 version | u32 kind | i32 owner | u32 reserved | u64 payload
//   bytes | u64 check value
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "runtime/status.h"
#include "transport/shm/shm_segment.h"

namespace eagercomm {

inline constexpr size_t kShmSegmentHeaderBytes = 40;

// The header of the segment `key` describes.
std::array<uint8_t, kShmSegmentHeaderBytes> shm_segment_header(const ShmKey& key);
// Ok when `header` (the first bytes of a mapped segment) is the header of the segment `key`
// describes; kProtocolError otherwise (also when fewer than kShmSegmentHeaderBytes are given).
// `what` names the key in errors.
Status shm_check_segment_header(std::span<const uint8_t> header, const ShmKey& key,
                                const char* what);

}  // namespace eagercomm
