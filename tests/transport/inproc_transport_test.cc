// The inproc backend's own behaviour; what every backend promises (writes and notifications,
// back-pressure, wait and wake, mapped stores, bad keys, close) is checked by
// tests/transport/transport_contract_test.cc. Here: the key's fabric, version and kind checks, what
// CUDA memory gets without a GPU (tests/transport/gpu_ipc_test.cc moves data between device buffers
// where there is one), memory that outlives its owner, world-size mismatches, a wait() that sleeps
// its whole timeout.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>

#include "runtime/gpu.h"
#include "tests/harness/thread_world.h"

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

// The key's own fields (inproc_key.h): a forged fabric id, an older version and a memory kind
// that is not the region's are refused, saying which. (Garbage, short and other ranks' keys:
// the contract suite.)
TEST(InprocTransport, KeysNameTheirFabricVersionAndKind) {
  Transports tp(2);
  auto region = tp[1].allocate(128, MemoryKind::kHost).value();
  const std::vector<uint8_t> key = region->remote_key();
  std::vector<uint8_t> forged = key;
  forged[8] ^= 0xff;  // fabric id
  EXPECT_EQ(tp[0].import_region(1, forged).status().code(), StatusCode::kProtocolError);
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
  EXPECT_TRUE(tp[0].import_region(1, key).ok());
}

// inproc bounds no sleep (shm and ucx cap theirs to probe peers, verbs naps): a wait() with
// nothing to do lasts its timeout.
TEST(InprocTransport, WaitWithNothingToDoSleepsItsTimeout) {
  Transports tp(2);
  const auto t0 = std::chrono::steady_clock::now();
  tp[1].wait(std::chrono::milliseconds(30));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(25));
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

}  // namespace
}  // namespace eagercomm::test
