// FNV-1a, 64 bits: the one hash behind shm segment names (the scope hash), ucx's wire
// checksums and its host word, and job ids (launch_env.cc, with the basis below). Its values are
// names and wire formats that ranks compare with each other: never change them
// (tests/runtime/hash_test.cc pins them). Not for anything an attacker chooses to collide: a check
// against mistakes only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace eagercomm {

inline constexpr uint64_t kFnv1aOffsetBasis = 0xcbf29ce484222325ull;  // 14695981039346656037
inline constexpr uint64_t kFnv1aPrime = 0x100000001b3ull;             // 1099511628211

inline uint64_t fnv1a(const void* data, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t h = kFnv1aOffsetBasis;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * kFnv1aPrime;
  return h;
}

constexpr uint64_t fnv1a(std::string_view text, uint64_t basis = kFnv1aOffsetBasis) {
  uint64_t h = basis;
  for (const char c : text) h = (h ^ static_cast<uint8_t>(c)) * kFnv1aPrime;
  return h;
}

// The offset basis job ids have always been hashed with: FNV's with its last digit lost
// (14695981039346656037 -> 1469598103934665603). Not standard FNV-1a, but a job id names the
// job's shared-memory segments, which launchers and ranks compute each on their own: it stays.
inline constexpr uint64_t kJobIdHashBasis = 1469598103934665603ull;

// The hash in job ids (launch_env.cc: overlong ids, ids made from the store's address).
constexpr uint64_t job_id_hash(std::string_view text) { return fnv1a(text, kJobIdHashBasis); }

}  // namespace eagercomm
