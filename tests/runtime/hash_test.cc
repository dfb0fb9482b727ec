// runtime/hash.h (FNV-1a 64) and runtime/host_identity.h. The hash names shm segments and job
// ids and checks ucx's wire blobs, which ranks compare with each other: its values are pinned
// here, against the published FNV-1a test vectors and against the loops it replaced
// (launch_env.cc's job ids, shm's scope hash, ucx's checksums), so a change cannot go unseen.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/hash.h"
#include "runtime/host_identity.h"
#include "transport/shm/shm_segment.h"
#include "transport/ucx/ucx_wire.h"

namespace eagercomm {
namespace {

// The copies runtime/hash.h replaced, verbatim but for their names. launch_env.cc's basis is
// not FNV's (a digit short): job_id_hash() keeps it.
uint64_t launch_env_fnv1a(std::string_view text) {  // runtime/launch_env.cc
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}
uint64_t ucx_fnv1a(const uint8_t* p, size_t n) {  // transport/ucx/ucx_wire.cc, ucx_transport.cc
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

TEST(Fnv1a, PublishedTestVectors) {
  // From the FNV reference (Fowler, Noll, Vo): FNV-1a 64.
  EXPECT_EQ(fnv1a(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a("foobar"), 0x85944171f73967e8ull);
  static_assert(fnv1a("a") == 0xaf63dc4c8601ec8cull, "usable at compile time");
  EXPECT_EQ(kFnv1aOffsetBasis, 14695981039346656037ull);
  EXPECT_EQ(kFnv1aPrime, 1099511628211ull);
}

TEST(Fnv1a, JobIdHashKeepsItsOwnBasis) {
  // Job ids used FNV-1a with a basis one digit short; the ids must not change.
  EXPECT_EQ(job_id_hash(""), 0x14650fb0739d0383ull);
  EXPECT_EQ(job_id_hash("a"), 0x44bd8ad473cd9906ull);
  EXPECT_EQ(job_id_hash("198.18.0.1:29400"), 0xe61b798ba05261e0ull);
  EXPECT_NE(job_id_hash("a"), fnv1a("a"));
}

TEST(Fnv1a, BytesAndTextAgree) {
  const char raw[] = "eagercomm\0with a zero byte";
  const std::string text(raw, sizeof(raw) - 1);
  EXPECT_EQ(fnv1a(text.data(), text.size()), fnv1a(std::string_view(text)));
  const uint8_t high[] = {0x80, 0xff, 0x00, 0x7f};
  EXPECT_EQ(fnv1a(high, sizeof(high)),
            fnv1a(std::string_view(reinterpret_cast<const char*>(high), sizeof(high))));
}

TEST(Fnv1a, SameValuesAsTheCopiesItReplaced) {
  std::mt19937_64 random(20);
  for (int i = 0; i < 200; ++i) {
    std::string s(static_cast<size_t>(random() % 300), '\0');
    for (char& c : s) c = static_cast<char>(random());
    const auto* bytes = reinterpret_cast<const uint8_t*>(s.data());
    ASSERT_EQ(job_id_hash(s), launch_env_fnv1a(s)) << i;
    ASSERT_EQ(fnv1a(s), ucx_fnv1a(bytes, s.size())) << i;
    ASSERT_EQ(fnv1a(s.data(), s.size()), ucx_fnv1a(bytes, s.size())) << i;
  }
}

TEST(Fnv1a, ShmScopeHashIsUnchanged) {
  for (const char* scope : {"", "world", "world/split-3", "p\xc3\xa9r\xff"}) {
    EXPECT_EQ(shm_scope_hash(scope),
              hex(ucx_fnv1a(reinterpret_cast<const uint8_t*>(scope), std::strlen(scope))))
        << scope;
  }
  EXPECT_EQ(shm_scope_hash("world"), hex(fnv1a("world")));
}

TEST(Fnv1a, UcxWireChecksumsAreUnchanged) {
  const std::vector<uint8_t> rkey = {1, 2, 3, 4, 5, 250, 251, 0, 9};
  UcxKeyHeader h{};
  h.owner = 2;
  h.instance = 0x1234;
  h.base = 0x7000;
  h.size = 4096;
  const std::vector<uint8_t> key = ucx_encode_key(h, rkey);
  UcxKeyHeader written{};
  ASSERT_GE(key.size(), sizeof(written));
  std::memcpy(&written, key.data(), sizeof(written));
  EXPECT_EQ(written.checksum, ucx_fnv1a(rkey.data(), rkey.size()));

  const std::vector<uint8_t> worker = {10, 20, 30};
  const std::vector<uint8_t> notify_key = {40, 50};
  UcxAddressHeader a{};
  a.rank = 1;
  a.instance = 7;
  a.host = host_identity_hash();
  a.ring_capacity = 64;
  const std::vector<uint8_t> address = ucx_encode_address(a, worker, notify_key);
  UcxAddressHeader aw{};
  ASSERT_GE(address.size(), sizeof(aw));
  std::memcpy(&aw, address.data(), sizeof(aw));
  const std::vector<uint8_t> body = {10, 20, 30, 40, 50};
  EXPECT_EQ(aw.checksum, ucx_fnv1a(body.data(), body.size()));
  EXPECT_EQ(aw.host, host_identity_hash());
}

TEST(HostIdentity, BootNamespaceAndHostName) {
  const std::string id = host_identity();
  EXPECT_EQ(id, host_identity());  // stable within a process
  // "<boot id>/<IPC namespace>/<host name>"; the namespace itself reads "ipc:[4026531839]".
  const size_t first = id.find('/');
  ASSERT_NE(first, std::string::npos) << id;
  EXPECT_GT(first, 0u) << "no boot id: " << id;
  EXPECT_NE(id.find('/', first + 1), std::string::npos) << id;
  EXPECT_EQ(host_identity_hash(), fnv1a(id));
}

}  // namespace
}  // namespace eagercomm
