// FNV-1a, 64 bits: the one hash behind job ids (launch_env.cc), shm segment names (the scope
// hash), ucx's wire checksums and its host word. Its values are names and wire formats that
// ranks compare with each other: never change them (tests/hash_test.cc pins known vectors).
// Not for anything an attacker chooses to collide: a checksum against mistakes only.
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

constexpr uint64_t fnv1a(std::string_view text) {
  uint64_t h = kFnv1aOffsetBasis;
  for (const char c : text) h = (h ^ static_cast<uint8_t>(c)) * kFnv1aPrime;
  return h;
}

}  // namespace eagercomm
