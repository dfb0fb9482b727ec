// The inproc backend against the transport contract: registration and keys, one-sided writes
// with notifications delivered after the data and in per-pair order, back-pressure, blocking
// wait and wake, bad keys and kinds, and what CUDA memory gets without a GPU (tests/gpu_ipc_test.cc
// moves data between device buffers where there is one). Plus the registration cache on top of it.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>

#include "runtime/gpu.h"
#include "tests/transport_pair.h"
#include "transport/registration_cache.h"

namespace eagercomm::test {
namespace {

// The error for MemoryKind::kCuda where CUDA cannot work: kNotSupported in a build without CUDA,
// kUnavailable without a GPU, both naming why and the call.
void expect_no_cuda(const Status& s, const std::string& call) {
  EXPECT_NE(s.message().find(call), std::string::npos) << s.to_string();
  if (!gpu::cuda_built()) {
    EXPECT_EQ(s.code(), StatusCode::kNotSupported) << s.to_string();
    EXPECT_NE(s.message().find("needs a build with CUDA"), std::string::npos) << s.to_string();
  } else {
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.to_string();
    EXPECT_NE(s.message().find("needs a GPU"), std::string::npos) << s.to_string();
    EXPECT_NE(s.message().find(gpu::query().reason), std::string::npos) << s.to_string();
  }
}

bool have_gpu() { return !gpu::query().devices.empty(); }

std::vector<TransportCompletion> drain(Transport& t) {
  std::vector<TransportCompletion> out;
  TransportCompletion buf[16];
  size_t n;
  while ((n = t.poll(buf)) > 0) out.insert(out.end(), buf, buf + n);
  return out;
}

TEST(InprocTransport, AllocateIsZeroedAndImportable) {
  Transports tp(2);
  auto region = tp[1].allocate(1 << 20, MemoryKind::kHost);
  ASSERT_TRUE(region.ok());
  auto* p = static_cast<uint8_t*>(region.value()->data());
  EXPECT_EQ(p[0], 0);
  EXPECT_EQ(p[(1 << 20) - 1], 0);
  auto remote = tp[0].import_region(1, region.value()->remote_key());
  ASSERT_TRUE(remote.ok()) << remote.status().to_string();
  EXPECT_EQ(remote.value()->size(), size_t{1} << 20);
  EXPECT_EQ(remote.value()->peer(), 1);
}

TEST(InprocTransport, WriteThenNotifyDeliversDataBeforeTagInOrder) {
  Transports tp(2);
  auto dst = tp[1].allocate(4096, MemoryKind::kHost).value();
  std::vector<uint8_t> src_bytes(4096);
  auto src = tp[0].register_memory(src_bytes.data(), src_bytes.size(), MemoryKind::kHost).value();
  auto remote = tp[0].import_region(1, dst->remote_key()).value();
  for (uint32_t i = 0; i < 100; ++i) {
    src_bytes[i] = static_cast<uint8_t>(i + 1);
    ASSERT_TRUE(tp[0].write(*src, i, *remote, i, 1, 1000 + i, i).ok());
  }
  auto at_sender = drain(tp[0]);
  ASSERT_EQ(at_sender.size(), 100u);
  for (uint32_t i = 0; i < 100; ++i) {
    EXPECT_EQ(at_sender[i].kind, TransportCompletion::Kind::kWriteDone);
    EXPECT_EQ(at_sender[i].cookie, i);
  }
  auto at_receiver = drain(tp[1]);
  ASSERT_EQ(at_receiver.size(), 100u);
  const auto* d = static_cast<const uint8_t*>(dst->data());
  for (uint32_t i = 0; i < 100; ++i) {
    EXPECT_EQ(at_receiver[i].kind, TransportCompletion::Kind::kNotify);
    EXPECT_EQ(at_receiver[i].peer, 0);
    EXPECT_EQ(at_receiver[i].tag, 1000 + i);
    EXPECT_EQ(d[i], i + 1);
  }
}

TEST(InprocTransport, DataIsVisibleWhenTheNotificationIsSeenAcrossThreads) {
  // The receiver polls on its own thread; every notification must find its data in place.
  Transports tp(2);
  auto dst = tp[1].allocate(64 * 1024, MemoryKind::kHost).value();
  auto remote = tp[0].import_region(1, dst->remote_key()).value();
  auto* mapped = static_cast<uint32_t*>(tp[0].mapped_address(*remote));
  ASSERT_NE(mapped, nullptr);
  constexpr uint32_t kMessages = 20000;
  std::atomic<uint32_t> bad{0};
  std::thread receiver([&] {
    uint32_t seen = 0;
    const auto* words = static_cast<const uint32_t*>(dst->data());
    while (seen < kMessages) {
      TransportCompletion c[8];
      const size_t n = tp[1].poll(c);
      if (n == 0) tp[1].wait(std::chrono::milliseconds(10));
      for (size_t i = 0; i < n; ++i) {
        // Values only grow in a word, so anything older than the tag means the store was not
        // visible when its notification was.
        if (words[c[i].tag % 16384] < c[i].tag) bad++;
        ++seen;
      }
    }
  });
  for (uint32_t i = 0; i < kMessages; ++i) {
    mapped[i % 16384] = i;  // a store through mapped memory, published by the notify
    Status s;
    while ((s = tp[0].notify(1, i)).code() == StatusCode::kBusy) std::this_thread::yield();
    ASSERT_TRUE(s.ok());
  }
  receiver.join();
  EXPECT_EQ(bad.load(), 0u);
}

TEST(InprocTransport, BackPressureIsBusyNotLoss) {
  Transports tp(2);
  uint32_t sent = 0;
  Status s;
  while ((s = tp[0].notify(1, sent)).ok()) ++sent;
  EXPECT_EQ(s.code(), StatusCode::kBusy);
  EXPECT_GT(sent, 0u);
  auto got = drain(tp[1]);
  ASSERT_EQ(got.size(), sent);
  for (uint32_t i = 0; i < sent; ++i) EXPECT_EQ(got[i].tag, i);
  EXPECT_TRUE(tp[0].notify(1, 7).ok());
}

TEST(InprocTransport, WaitBlocksUntilANotificationOrWake) {
  Transports tp(2);
  const auto t0 = std::chrono::steady_clock::now();
  tp[1].wait(std::chrono::milliseconds(30));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(25));
  std::thread waker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    tp[1].wake();
  });
  const auto t1 = std::chrono::steady_clock::now();
  tp[1].wait(std::chrono::seconds(30));
  EXPECT_LT(std::chrono::steady_clock::now() - t1, std::chrono::seconds(20));
  waker.join();
  // A wake before the wait is not lost.
  tp[1].wake();
  const auto t2 = std::chrono::steady_clock::now();
  tp[1].wait(std::chrono::seconds(30));
  EXPECT_LT(std::chrono::steady_clock::now() - t2, std::chrono::seconds(20));
  // A pending notification makes wait return at once.
  ASSERT_TRUE(tp[0].notify(1, 5).ok());
  const auto t3 = std::chrono::steady_clock::now();
  tp[1].wait(std::chrono::seconds(30));
  EXPECT_LT(std::chrono::steady_clock::now() - t3, std::chrono::seconds(20));
}

TEST(InprocTransport, BadKeysKindsAndBoundsAreErrors) {
  Transports tp(3);
  auto region = tp[1].allocate(128, MemoryKind::kHost).value();
  std::vector<uint8_t> key = region->remote_key();
  EXPECT_EQ(tp[0].import_region(2, key).status().code(), StatusCode::kProtocolError)
      << "a key of rank 1 presented as rank 2's";
  std::vector<uint8_t> short_key(key.begin(), key.begin() + 3);
  EXPECT_EQ(tp[0].import_region(1, short_key).status().code(), StatusCode::kProtocolError);
  std::vector<uint8_t> forged = key;
  forged[8] ^= 0xff;  // fabric id
  EXPECT_EQ(tp[0].import_region(1, forged).status().code(), StatusCode::kProtocolError);
  EXPECT_EQ(tp[0].import_region(7, key).status().code(), StatusCode::kInvalidArgument);
  std::vector<uint8_t> other_version = key;
  other_version[32] = 1;  // version 1: keys without a memory kind
  auto s = tp[0].import_region(1, other_version).status();
  EXPECT_EQ(s.code(), StatusCode::kProtocolError);
  EXPECT_NE(s.message().find("version 1"), std::string::npos) << s.to_string();
  // A host region's key that claims device memory (and so would be read as such).
  std::vector<uint8_t> other_kind = key;
  other_kind[33] = static_cast<uint8_t>(MemoryKind::kCuda);
  s = tp[0].import_region(1, other_kind).status();
  EXPECT_EQ(s.code(), StatusCode::kProtocolError);
  EXPECT_NE(s.message().find("is host memory"), std::string::npos) << s.to_string();
  EXPECT_EQ(tp[0].register_memory(nullptr, 8, MemoryKind::kHost).status().code(),
            StatusCode::kInvalidArgument);
  auto remote = tp[0].import_region(1, key).value();
  auto src = tp[0].allocate(64, MemoryKind::kHost).value();
  EXPECT_EQ(tp[0].write(*src, 0, *remote, 100, 64, 1, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tp[0].write(*src, 32, *remote, 0, 64, 1, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tp[0].notify(3, 1).code(), StatusCode::kInvalidArgument);
}

TEST(InprocTransport, CudaMemoryWithoutAGpuIsAClearError) {
  if (have_gpu()) GTEST_SKIP() << "a GPU is present: gpu_ipc_test moves device data instead";
  Transports tp(2);
  expect_no_cuda(tp[0].allocate(64, MemoryKind::kCuda).status(), "inproc: allocate");
  int x = 0;
  expect_no_cuda(tp[0].register_memory(&x, sizeof(x), MemoryKind::kCuda).status(),
                 "inproc: register_memory");
  // The transport keeps working for host memory.
  auto region = tp[1].allocate(64, MemoryKind::kHost);
  ASSERT_TRUE(region.ok());
  auto remote = tp[0].import_region(1, region.value()->remote_key());
  ASSERT_TRUE(remote.ok());
  EXPECT_NE(tp[0].mapped_address(*remote.value()), nullptr);
  auto bad_kind = tp[0].allocate(64, static_cast<MemoryKind>(9)).status();
  EXPECT_EQ(bad_kind.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_kind.message().find("unknown memory kind 9"), std::string::npos);
}

TEST(InprocTransport, RemoteMemoryOutlivesItsOwner) {
  Transports tp(2);
  auto region = tp[1].allocate(4096, MemoryKind::kHost).value();
  auto remote = tp[0].import_region(1, region->remote_key()).value();
  region.reset();
  tp.t[1].reset();  // the peer is gone
  auto* p = static_cast<uint8_t*>(tp[0].mapped_address(*remote));
  std::memset(p, 0xab, 4096);  // must not touch freed memory (ASan would tell)
  EXPECT_EQ(p[4095], 0xab);
}

TEST(InprocTransport, RanksInDifferentWorldSizesAreRejected) {
  Config config;
  HashStore store;
  TransportParams p0{0, 2, &config, &store, "sz"};
  TransportParams p1{1, 3, &config, &store, "sz"};
  auto a = create_transport("inproc", p0);
  ASSERT_TRUE(a.ok());
  auto b = create_transport("inproc", p1);
  EXPECT_EQ(b.status().code(), StatusCode::kMismatch);
}

TEST(RegistrationCache, HitsCoveringRangesAndEvictsLeastRecentlyUsed) {
  Transports tp(1);
  RegistrationCache cache(tp[0], 2);
  std::vector<uint8_t> a(1000), b(1000), c(1000);
  auto ra = cache.get(a.data(), a.size(), MemoryKind::kHost);
  ASSERT_TRUE(ra.ok());
  auto ra2 = cache.get(a.data() + 10, 100, MemoryKind::kHost);
  ASSERT_TRUE(ra2.ok());
  EXPECT_EQ(ra.value(), ra2.value());
  EXPECT_EQ(cache.hits(), 1u);
  ASSERT_TRUE(cache.get(b.data(), b.size(), MemoryKind::kHost).ok());
  ASSERT_TRUE(cache.get(a.data(), 1, MemoryKind::kHost).ok());         // a is now most recent
  ASSERT_TRUE(cache.get(c.data(), c.size(), MemoryKind::kHost).ok());  // evicts b
  EXPECT_EQ(cache.size(), 2u);
  const uint64_t misses = cache.misses();
  ASSERT_TRUE(cache.get(a.data(), 5, MemoryKind::kHost).ok());
  EXPECT_EQ(cache.misses(), misses);
  ASSERT_TRUE(cache.get(b.data(), 5, MemoryKind::kHost).ok());
  EXPECT_EQ(cache.misses(), misses + 1);
  // A range reaching past a cached region is a new registration.
  ASSERT_TRUE(cache.get(b.data() + 900, 200, MemoryKind::kHost).ok());
  EXPECT_EQ(cache.misses(), misses + 2);
  cache.invalidate(b.data() + 2, 1);  // overlaps the 5-byte registration of b
  const uint64_t before = cache.misses();
  ASSERT_TRUE(cache.get(b.data(), 5, MemoryKind::kHost).ok());
  EXPECT_EQ(cache.misses(), before + 1) << "an invalidated range must be registered again";
  // A failed registration (host memory passed as CUDA memory) is reported, not cached.
  const size_t cached = cache.size();
  EXPECT_FALSE(cache.get(a.data(), 4, MemoryKind::kCuda).ok());
  EXPECT_EQ(cache.size(), cached);
}

}  // namespace
}  // namespace eagercomm::test
