// The transport contract (tests/transport/transport_contract_test.cc), bad input: bad keys,
// offsets, peers and addresses are clear errors, connect() is idempotent.
#include "tests/transport/transport_contract_test.h"

namespace eagercomm::test::contract_test {
namespace {

// ---- bad input ----

// Remote keys that are garbage, cut short, padded, from another rank, or from another world are
// refused (kInvalidArgument or kProtocolError, with a message), never a crash; the transport
// keeps working afterwards.
TEST_P(TransportContract, BadKeysAreClearErrors) {
  ASSERT_NO_FATAL_FAILURE(make_world(3));
  ASSERT_NO_FATAL_FAILURE(make_world(2));  // another world of the same backend
  Shared good = share(1, 0, 4096);
  ASSERT_TRUE(good.remote);
  const std::vector<uint8_t> key = good.local->remote_key();
  ASSERT_FALSE(key.empty());
  Transport& a = t(0);
  auto refused = [&](int peer, const std::vector<uint8_t>& k, const std::string& what) {
    expect_bad_input(a.import_region(peer, k).status(), what);
  };
  refused(1, {}, "an empty key");
  for (size_t n = 0; n < key.size(); ++n) {
    refused(1, std::vector<uint8_t>(key.begin(), key.begin() + n),
            "the key cut to " + std::to_string(n) + " of " + std::to_string(key.size()) + " bytes");
  }
  std::vector<uint8_t> padded = key;
  padded.push_back(0x42);
  refused(1, padded, "the key with a byte appended");
  refused(1, std::vector<uint8_t>(key.size(), 0), "zeros");
  refused(1, std::vector<uint8_t>(key.size(), 0xff), "0xff bytes");
  std::mt19937 rng(5);
  for (size_t n : {key.size(), key.size(), size_t{3}, size_t{1000}}) {
    std::vector<uint8_t> noise(n);
    for (uint8_t& b : noise) b = static_cast<uint8_t>(rng());
    refused(1, noise, std::to_string(n) + " random bytes");
  }
  refused(1, t(1).local_address(), "a transport address");
  refused(2, key, "rank 1's key as rank 2's");
  refused(0, key, "rank 1's key as this rank's own");
  auto other_world = t(1, 1).allocate(4096, MemoryKind::kHost);
  ASSERT_TRUE(other_world.ok());
  refused(1, other_world.value()->remote_key(), "rank 1's key from another world");
  for (int peer : {-1, 3, 1000}) {
    const Status s = a.import_region(peer, key).status();
    expect_refused(s, "a key for rank " + std::to_string(peer));
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  }
  // Still working: the good key imports again and a write through it arrives.
  auto again = a.import_region(1, key);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  auto src = a.allocate(64, MemoryKind::kHost);
  ASSERT_TRUE(src.ok());
  std::memset(src.value()->data(), 0x3c, 64);
  std::vector<Completions> seen(3);
  ASSERT_TRUE(
      post_all(seen, [&] { return a.write(*src.value(), 0, *again.value(), 100, 64, 5, 5); }).ok());
  ASSERT_TRUE(drive(seen, [&] { return !seen[1].notes.empty(); }));
  EXPECT_EQ(static_cast<const uint8_t*>(good.local->data())[163], 0x3c);
}

// Out-of-bounds writes, peers that do not exist and null registrations are kInvalidArgument,
// and refused ones leave nothing behind: no delivery, no completion.
TEST_P(TransportContract, BadOffsetsAndPeersAreClearErrors) {
  ASSERT_NO_FATAL_FAILURE(make_world(2));
  Shared dst = share(1, 0, 128);
  auto src = t(0).allocate(64, MemoryKind::kHost);
  ASSERT_TRUE(dst.remote && src.ok());
  Transport& a = t(0);
  auto invalid = [](const Status& s, const std::string& what) {
    expect_refused(s, what);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << what << ": " << s.to_string();
  };
  invalid(a.write(*src.value(), 0, *dst.remote, 100, 64, 1, 1), "past the remote end");
  invalid(a.write(*src.value(), 32, *dst.remote, 0, 64, 1, 1), "past the local end");
  invalid(a.write(*src.value(), 0, *dst.remote, 129, 0, 1, 1), "an empty write past the end");
  invalid(a.write(*src.value(), SIZE_MAX, *dst.remote, 0, 2, 1, 1), "a wrapping local offset");
  invalid(a.write(*src.value(), 0, *dst.remote, SIZE_MAX - 1, 4, 1, 1), "a wrapping offset");
  invalid(a.write(*src.value(), 0, *dst.remote, 0, SIZE_MAX, 1, 1), "SIZE_MAX bytes");
  for (int peer : {-1, 2, 1 << 20}) {
    invalid(a.notify(peer, 1), "notify to rank " + std::to_string(peer));
  }
  invalid(a.register_memory(nullptr, 64, MemoryKind::kHost).status(), "registering null");
  std::vector<Completions> seen(2);
  const auto linger = Clock::now() + 50ms;
  drive(seen, [&] { return Clock::now() > linger; });
  EXPECT_TRUE(seen[0].done.empty()) << "a refused write completed";
  EXPECT_TRUE(seen[1].notes.empty()) << "a refused write notified";
  // The edges themselves are fine: the last byte, and 0 bytes at the very end.
  std::memset(src.value()->data(), 0x5c, 64);
  ASSERT_TRUE(
      post_all(seen, [&] { return a.write(*src.value(), 63, *dst.remote, 127, 1, 2, 2); }).ok());
  ASSERT_TRUE(
      post_all(seen, [&] { return a.write(*src.value(), 64, *dst.remote, 128, 0, 3, 3); }).ok());
  ASSERT_TRUE(drive(seen, [&] { return seen[1].notes.size() == 2 && seen[0].done.size() == 2; }));
  // Read only now: the emulated verbs device places data on a thread of its own, ordered after
  // this thread's earlier reads by nothing TSan can see (its rings are mapped twice).
  const auto* d = static_cast<const uint8_t*>(dst.local->data());
  EXPECT_TRUE(std::all_of(d, d + 127, [](uint8_t b) { return b == 0; }))
      << "a refused write landed";
  EXPECT_EQ(d[127], 0x5c);
}

// connect() is idempotent and refuses addresses that are garbage, cut short or another rank's;
// after the refusals the right address connects and traffic flows.
TEST_P(TransportContract, ConnectIsIdempotentAndBadAddressesAreErrors) {
  ASSERT_NO_FATAL_FAILURE(make_world(2, /*connect=*/false));
  Transport& a = t(0);
  Transport& b = t(1);
  const std::vector<uint8_t> address = b.local_address();
  ASSERT_FALSE(address.empty());
  expect_bad_input(a.connect(1, {}), "an empty address");
  expect_bad_input(a.connect(1, std::vector<uint8_t>(address.begin(), address.end() - 1)),
                   "the address cut by a byte");
  expect_bad_input(
      a.connect(1, std::vector<uint8_t>(address.begin(), address.begin() + address.size() / 2)),
      "half the address");
  expect_bad_input(a.connect(1, std::vector<uint8_t>(address.size(), 0x77)), "garbage");
  expect_bad_input(a.connect(1, a.local_address()), "rank 0's address as rank 1's");
  for (int peer : {-1, 2}) {
    const Status s = a.connect(peer, address);
    expect_refused(s, "connect to rank " + std::to_string(peer));
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  }
  ASSERT_TRUE(a.connect(1, address).ok());
  ASSERT_TRUE(a.connect(1, address).ok()) << "connect() is not idempotent";
  ASSERT_TRUE(b.connect(0, a.local_address()).ok());
  ASSERT_TRUE(b.connect(0, a.local_address()).ok()) << "connect() is not idempotent";
  Shared dst = share(1, 0, 64);
  ASSERT_TRUE(dst.remote);
  auto src = a.allocate(64, MemoryKind::kHost);
  ASSERT_TRUE(src.ok());
  std::vector<Completions> seen(2);
  ASSERT_TRUE(
      post_all(seen, [&] { return a.write(*src.value(), 0, *dst.remote, 0, 64, 1, 1); }).ok());
  ASSERT_TRUE(post_all(seen, [&] { return b.notify(0, 2); }).ok());
  ASSERT_TRUE(drive(seen, [&] { return seen[1].notes.size() == 1 && seen[0].notes.size() == 1; }));
  EXPECT_EQ(seen[1].notes[0].tag, 1u);
  EXPECT_EQ(seen[0].notes[0].tag, 2u);
}

}  // namespace
}  // namespace eagercomm::test::contract_test
