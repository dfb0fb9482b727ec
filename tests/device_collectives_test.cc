// GPU buffers in collectives (docs/RDMA_AND_GPU.md, "GPU buffers in collectives"): the
// device-free decisions (routing, staging growth) everywhere, and on a GPU allreduce, broadcast,
// allgather and partial-allreduce posts of device buffers in an in-process world, against host
// references. The device tests skip, saying why, where there is no GPU. tests/gpu/run.sh runs
// this on GPU machines.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/cuda/cuda_reduce.h"
#include "collectives/device_collectives.h"
#include "collectives/device_routing.h"
#include "collectives/partial_allreduce.h"
#include "collectives/reduce_kernels.h"
#include "runtime/gpu.h"

namespace eagercomm {
namespace {

using detail::choose_device_path;
using detail::DevicePath;
using detail::kStagingGranule;
using detail::staging_capacity;

constexpr DataType kTypes[] = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                               DataType::kBFloat16, DataType::kInt32,   DataType::kInt64};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax};
constexpr MemoryKind kHost = MemoryKind::kHost, kCuda = MemoryKind::kCuda;

// ---- device-free ----

TEST(DeviceRouting, HostBuffersTakeTheHostPath) {
  for (DataType t : kTypes) {
    for (ReduceOp op : kOps) {
      for (bool kernels : {false, true}) {
        auto p = choose_device_path("allreduce", kHost, kHost, t, op, kernels);
        ASSERT_TRUE(p.ok()) << p.status().to_string();
        EXPECT_EQ(*p, DevicePath::kHost);
      }
    }
  }
}

TEST(DeviceRouting, AnyDeviceBufferIsStagedForEveryTypeAndOperator) {
  const MemoryKind kinds[][2] = {{kCuda, kCuda}, {kCuda, kHost}, {kHost, kCuda}};
  for (auto& k : kinds) {
    for (DataType t : kTypes) {
      for (ReduceOp op : kOps) {
        auto p = choose_device_path("allreduce", k[0], k[1], t, op, true);
        ASSERT_TRUE(p.ok()) << p.status().to_string();
        EXPECT_EQ(*p, DevicePath::kStaged);
      }
      auto copy = choose_device_path("allgather", k[0], k[1], t, std::nullopt, false);
      ASSERT_TRUE(copy.ok()) << "copies need no kernels";
      EXPECT_EQ(*copy, DevicePath::kStaged);
    }
  }
}

TEST(DeviceRouting, ErrorsNameWhatIsWrong) {
  auto no_kernels =
      choose_device_path("allreduce", kCuda, kCuda, DataType::kBFloat16, ReduceOp::kSum, false);
  ASSERT_FALSE(no_kernels.ok());
  EXPECT_EQ(no_kernels.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(no_kernels.status().message().find("bf16"), std::string::npos)
      << no_kernels.status().message();

  auto bad_type = choose_device_path("allreduce", kCuda, kHost, static_cast<DataType>(99),
                                     ReduceOp::kSum, true);
  ASSERT_FALSE(bad_type.ok());
  EXPECT_EQ(bad_type.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_type.status().message().find("99"), std::string::npos);

  auto bad_op = choose_device_path("allreduce", kHost, kCuda, DataType::kFloat32,
                                   static_cast<ReduceOp>(7), true);
  ASSERT_FALSE(bad_op.ok());
  EXPECT_EQ(bad_op.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_op.status().message().find("ReduceOp"), std::string::npos);
}

TEST(StagingCapacity, KeepsWhatFitsAndGrowsGeometrically) {
  EXPECT_EQ(staging_capacity(0, 0), 0u);
  EXPECT_EQ(staging_capacity(0, 1), kStagingGranule);
  EXPECT_EQ(staging_capacity(kStagingGranule, 100), kStagingGranule);
  EXPECT_EQ(staging_capacity(kStagingGranule, kStagingGranule), kStagingGranule);
  EXPECT_EQ(staging_capacity(kStagingGranule, kStagingGranule + 1), 2 * kStagingGranule);
  EXPECT_EQ(staging_capacity(kStagingGranule, 10 * kStagingGranule + 3), 11 * kStagingGranule);
  // A run of growing requests reallocates O(log n) times.
  size_t cap = 0, reallocations = 0;
  for (size_t need = 1; need <= (size_t{1} << 30); need += need / 8 + 1) {
    const size_t next = staging_capacity(cap, need);
    ASSERT_GE(next, need);
    if (next != cap) ++reallocations;
    cap = next;
  }
  EXPECT_LE(reallocations, 20u);
  // No overflow near the top of size_t.
  EXPECT_GE(staging_capacity(SIZE_MAX / 2 + 10, SIZE_MAX - 3), SIZE_MAX - 3);
}

TEST(DeviceStaging, WithoutAGpuItCannotBeMadeAndHostCallsNeverNeedIt) {
  if (gpu::available()) GTEST_SKIP() << "a GPU is here";
  auto staging = detail::DeviceStaging::create();
  ASSERT_FALSE(staging.ok());
  EXPECT_EQ(staging.status().code(), StatusCode::kUnavailable) << staging.status().to_string();
  EXPECT_FALSE(detail::is_device_pointer(&staging));
}

// ---- in-process worlds ----

void run_ranks(std::vector<std::unique_ptr<Communicator>>& world,
               const std::function<void(Communicator&)>& body) {
  std::vector<std::thread> threads;
  for (auto& c : world) threads.emplace_back([&body, &c] { body(*c); });
  for (auto& t : threads) t.join();
}

// Without a GPU the entry points behave as before for host buffers (async calls run in the
// engine, results as always).
TEST(DeviceCollectives, HostBuffersUnchanged) {
  auto world = make_inproc_world(3);
  ASSERT_TRUE(world.ok()) << world.status().to_string();
  run_ranks(world.value(), [](Communicator& c) {
    std::vector<float> v(1000, static_cast<float>(c.rank() + 1));
    ASSERT_TRUE(c.allreduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum).ok());
    EXPECT_EQ(v[999], 6.0f);
    std::vector<int32_t> g(3 * 4), mine(4, c.rank());
    auto req = c.allgather_async(mine.data(), g.data(), 4, DataType::kInt32);
    ASSERT_TRUE(req.ok());
    ASSERT_TRUE(req.value().wait().ok());
    EXPECT_EQ(g[11], 2);
    int32_t b = c.rank() == 1 ? 42 : 0;
    ASSERT_TRUE(c.broadcast(&b, 1, DataType::kInt32, 1).ok());
    EXPECT_EQ(b, 42);
  });
}

#define REQUIRE_GPU()                                                              \
  do {                                                                             \
    if (!cuda::reduce_built()) GTEST_SKIP() << "this build has no CUDA";           \
    if (!gpu::available()) GTEST_SKIP() << "no GPU here: " << gpu::query().reason; \
  } while (0)

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> out(n);
  std::mt19937 rng(seed);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

gpu::DeviceBuffer device_copy(const std::vector<uint8_t>& host) {
  auto d = gpu::DeviceBuffer::allocate(host.size() ? host.size() : 1);
  EXPECT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_TRUE(gpu::copy(d.value().data(), host.data(), host.size()).ok());
  return std::move(d).value();
}

std::vector<uint8_t> host_copy(const void* device, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  EXPECT_TRUE(gpu::copy(out.data(), device, bytes).ok());
  return out;
}

// Every rank's result equals the rank-order CPU reduction, bit for bit, whatever the kinds of
// send and recv (device/device, in place, host send, host recv).
TEST(DeviceCollectives, AllreduceMatchesTheRankOrderCpuReduction) {
  REQUIRE_GPU();
  constexpr size_t kCount = 4099;
  for (int P : {2, 3, 4}) {
    auto world = make_inproc_world(P);
    ASSERT_TRUE(world.ok()) << world.status().to_string();
    for (DataType t : kTypes) {
      for (ReduceOp op : kOps) {
        const size_t bytes = kCount * dtype_size(t);
        std::vector<std::vector<uint8_t>> in(P);
        for (int r = 0; r < P; ++r) in[r] = random_bytes(bytes, 7 * r + 1);
        std::vector<uint8_t> want = in[0];
        for (int r = 1; r < P; ++r) reduce(t, op, want.data(), want.data(), in[r].data(), kCount);
        for (int variant = 0; variant < 4; ++variant) {
          run_ranks(world.value(), [&](Communicator& c) {
            const std::vector<uint8_t>& mine = in[c.rank()];
            gpu::DeviceBuffer send = device_copy(mine);
            gpu::DeviceBuffer recv = device_copy(std::vector<uint8_t>(bytes));
            std::vector<uint8_t> host_recv(bytes);
            const void* s = variant == 2 ? mine.data() : send.data();
            void* d = variant == 1 ? send.data() : variant == 3 ? host_recv.data() : recv.data();
            const Status st = c.allreduce(s, d, kCount, t, op);
            ASSERT_TRUE(st.ok()) << st.to_string();
            const std::vector<uint8_t> got = variant == 3 ? host_recv : host_copy(d, bytes);
            EXPECT_EQ(got, want) << "P=" << P << " " << dtype_name(t) << " op "
                                 << static_cast<int>(op) << " variant " << variant << " rank "
                                 << c.rank();
          });
        }
      }
    }
  }
}

TEST(DeviceCollectives, AsyncCallsCompleteBeforeReturning) {
  REQUIRE_GPU();
  auto world = make_inproc_world(2);
  ASSERT_TRUE(world.ok());
  run_ranks(world.value(), [](Communicator& c) {
    const std::vector<uint8_t> mine(64, static_cast<uint8_t>(c.rank() + 1));
    gpu::DeviceBuffer buf = device_copy(mine);
    auto req = c.allreduce_async(buf.data(), buf.data(), 64, DataType::kInt32, ReduceOp::kMax);
    ASSERT_TRUE(req.ok()) << req.status().to_string();
    EXPECT_TRUE(req.value().ready());
    EXPECT_TRUE(req.value().wait().ok());
    EXPECT_EQ(host_copy(buf.data(), 64), std::vector<uint8_t>(64, 2));
  });
}

TEST(DeviceCollectives, BroadcastAndAllgather) {
  REQUIRE_GPU();
  constexpr size_t kCount = 10000;
  for (int P : {2, 3, 4}) {
    auto world = make_inproc_world(P);
    ASSERT_TRUE(world.ok());
    run_ranks(world.value(), [&](Communicator& c) {
      const size_t bytes = kCount * 4;
      const int root = P - 1;
      const std::vector<uint8_t> rooted = random_bytes(bytes, 99);
      gpu::DeviceBuffer b = device_copy(c.rank() == root ? rooted : std::vector<uint8_t>(bytes));
      ASSERT_TRUE(c.broadcast(b.data(), kCount, DataType::kFloat32, root).ok());
      EXPECT_EQ(host_copy(b.data(), bytes), rooted);

      std::vector<uint8_t> want;
      for (int r = 0; r < P; ++r) {
        const auto part = random_bytes(bytes, r);
        want.insert(want.end(), part.begin(), part.end());
      }
      gpu::DeviceBuffer send = device_copy(random_bytes(bytes, c.rank()));
      gpu::DeviceBuffer recv = device_copy(std::vector<uint8_t>(bytes * P));
      ASSERT_TRUE(c.allgather(send.data(), recv.data(), kCount, DataType::kFloat32).ok());
      EXPECT_EQ(host_copy(recv.data(), bytes * P), want);
      // In place: this rank's block of the device receive buffer.
      gpu::DeviceBuffer inplace = device_copy(std::vector<uint8_t>(bytes * P));
      uint8_t* block = static_cast<uint8_t*>(inplace.data()) + bytes * c.rank();
      ASSERT_TRUE(gpu::copy(block, random_bytes(bytes, c.rank()).data(), bytes).ok());
      ASSERT_TRUE(c.allgather(block, inplace.data(), kCount, DataType::kFloat32).ok());
      EXPECT_EQ(host_copy(inplace.data(), bytes * P), want);
    });
  }
}

TEST(DeviceCollectives, PartialAllreducePostsADeviceGradient) {
  REQUIRE_GPU();
  constexpr size_t kCount = 1000;
  auto world = make_inproc_world(3);
  ASSERT_TRUE(world.ok());
  run_ranks(world.value(), [&](Communicator& c) {
    auto pa = PartialAllreduce::create(c, kCount, DataType::kFloat32, PartialMode::sync());
    ASSERT_TRUE(pa.ok()) << pa.status().to_string();
    std::vector<float> grad(kCount);
    for (size_t i = 0; i < kCount; ++i) grad[i] = static_cast<float>(i % 17 + c.rank());
    auto d = gpu::DeviceBuffer::allocate(kCount * 4);
    ASSERT_TRUE(d.ok());
    ASSERT_TRUE(gpu::copy(d.value().data(), grad.data(), kCount * 4).ok());
    ASSERT_TRUE(pa.value()->post(d.value().data(), kCount, DataType::kFloat32).ok());
    auto r = pa.value()->wait();
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    auto out = gpu::DeviceBuffer::allocate(kCount * 4);
    ASSERT_TRUE(out.ok());
    ASSERT_TRUE(r.value().copy_to(out.value().data()).ok());
    std::vector<float> got(kCount);
    ASSERT_TRUE(gpu::copy(got.data(), out.value().data(), kCount * 4).ok());
    for (size_t i = 0; i < kCount; ++i) {
      ASSERT_EQ(got[i], static_cast<float>(3 * (i % 17) + 3)) << i;
    }
    pa.value()->destroy();
  });
}

TEST(RoundResultCopyTo, HostDestination) {
  auto world = make_inproc_world(2);
  ASSERT_TRUE(world.ok());
  run_ranks(world.value(), [](Communicator& c) {
    auto pa = PartialAllreduce::create(c, 8, DataType::kInt32, PartialMode::sync());
    ASSERT_TRUE(pa.ok()) << pa.status().to_string();
    std::vector<int32_t> g(8, c.rank() + 1), out(8, -1);
    ASSERT_TRUE(pa.value()->post(g.data(), 8, DataType::kInt32).ok());
    auto r = pa.value()->wait();
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_TRUE(r.value().copy_to(out.data()).ok());
    EXPECT_EQ(out, std::vector<int32_t>(8, 3));
    EXPECT_FALSE(r.value().copy_to(nullptr).ok());
    pa.value()->destroy();
  });
}

}  // namespace
}  // namespace eagercomm
