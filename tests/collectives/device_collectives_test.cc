// GPU buffers in collectives (docs/RDMA_AND_GPU.md, "GPU buffers in collectives"): the
// device-free decisions (routing, staging growth) everywhere, and on a GPU allreduce, broadcast,
// allgather and partial-allreduce posts of device buffers in an in-process world, against host
// references. The device tests skip, saying why, where there is no GPU. tests/gpu/run.sh runs
// this on GPU machines.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/cuda/cuda_reduce.h"
#include "collectives/device/device_collectives.h"
#include "collectives/device/device_routing.h"
#include "collectives/kernels/reduce_kernels.h"
#include "collectives/partial_allreduce.h"
#include "runtime/gpu.h"
#include "tests/harness/thread_world.h"

namespace eagercomm {
namespace {

using detail::choose_device_path;
using detail::DevicePath;
using detail::kStagingGranule;
using detail::staging_capacity;
using test::run_ranks;

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

// A misaligned pointer in a kernel is a sticky error that ends the process's CUDA context: the
// kernels' arguments are checked first, for every type's width.
TEST(DeviceKernels, MisalignedBuffersAreRefusedBeforeAnyKernel) {
  alignas(16) static uint8_t block[64];
  for (DataType t : kTypes) {
    const size_t width = dtype_size(t);
    EXPECT_TRUE(cuda::check_alignment("allreduce", t, block).ok());
    EXPECT_TRUE(cuda::check_alignment("allreduce", t, block + width).ok());
    if (width == 1) continue;
    const Status s = cuda::check_alignment("allreduce", t, block + 1);
    ASSERT_FALSE(s.ok()) << dtype_name(t);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("allreduce"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(std::to_string(width) + "-byte"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(std::string(dtype_name(t))), std::string::npos) << s.message();
  }
  // 8-byte elements at a 4-byte boundary.
  EXPECT_FALSE(cuda::check_alignment("x", DataType::kFloat64, block + 4).ok());
  EXPECT_FALSE(cuda::check_alignment("x", DataType::kInt64, block + 4).ok());
  EXPECT_TRUE(cuda::check_alignment("x", DataType::kFloat32, block + 4).ok());
  // reduce() applies it (builds without CUDA say so first).
  if (cuda::reduce_built()) {
    const Status s =
        cuda::reduce(DataType::kFloat32, ReduceOp::kSum, block + 2, block, block, 4, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  }
}

TEST(DeviceStaging, WithoutAGpuItCannotBeMadeAndHostCallsNeverNeedIt) {
  if (gpu::available()) GTEST_SKIP() << "a GPU is here";
  auto staging = detail::DeviceStaging::create(0);
  ASSERT_FALSE(staging.ok());
  EXPECT_EQ(staging.status().code(), StatusCode::kUnavailable) << staging.status().to_string();
  EXPECT_FALSE(detail::is_device_pointer(&staging));
}

// ---- in-process worlds ----

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
    // The forms with a CUDA stream ignore it for host buffers (this handle is no stream): no
    // CUDA call is made.
    const CudaStream bogus{reinterpret_cast<void*>(uintptr_t{0x1234})};
    ASSERT_TRUE(
        c.allreduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum, bogus).ok());
    EXPECT_EQ(v[999], 18.0f);
    auto areq =
        c.allreduce_async(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kMax, bogus);
    ASSERT_TRUE(areq.ok());
    ASSERT_TRUE(areq.value().wait().ok());
    EXPECT_EQ(v[0], 18.0f);
    int32_t b2 = c.rank() == 2 ? 7 : 0;
    ASSERT_TRUE(c.broadcast(&b2, 1, DataType::kInt32, 2, bogus).ok());
    EXPECT_EQ(b2, 7);
    ASSERT_TRUE(c.allgather(mine.data(), g.data(), 4, DataType::kInt32, bogus).ok());
    EXPECT_EQ(g[0], 0);
    EXPECT_EQ(g[11], 2);
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

// The stream argument orders the call after the caller's work: the input is written on a
// non-blocking stream of the caller's, behind a copy long enough (hundreds of MiB) that a call
// not ordered after that stream would read the old contents. The same for a partial post and
// RoundResult::copy_to on the caller's stream.
TEST(DeviceCollectives, CallsAreOrderedAfterTheCallersStream) {
  REQUIRE_GPU();
  constexpr size_t kCount = 1 << 16;
  constexpr size_t kBusyBytes = size_t{256} << 20;
  auto world = make_inproc_world(2);
  ASSERT_TRUE(world.ok());
  run_ranks(world.value(), [&](Communicator& c) {
    auto device = gpu::current_device();
    ASSERT_TRUE(device.ok()) << device.status().to_string();
    auto user = gpu::Stream::create(*device);
    ASSERT_TRUE(user.ok()) << user.status().to_string();
    auto busy_src = gpu::PinnedBuffer::allocate(kBusyBytes);
    auto busy_dst = gpu::DeviceBuffer::allocate(kBusyBytes);
    ASSERT_TRUE(busy_src.ok() && busy_dst.ok());
    const std::vector<float> fresh(kCount, static_cast<float>(c.rank() + 1));
    const std::vector<uint8_t> zeros(kCount * 4, 0);
    gpu::DeviceBuffer in = device_copy(zeros);
    for (int trial = 0; trial < 3; ++trial) {
      ASSERT_TRUE(gpu::copy(in.data(), zeros.data(), zeros.size()).ok());
      void* s = user.value().handle();
      ASSERT_TRUE(
          gpu::copy_async(busy_dst.value().data(), busy_src.value().data(), kBusyBytes, s).ok());
      ASSERT_TRUE(gpu::copy_async(in.data(), fresh.data(), kCount * 4, s).ok());
      ASSERT_TRUE(c.allreduce(in.data(), in.data(), kCount, DataType::kFloat32, ReduceOp::kSum,
                              CudaStream{s})
                      .ok());
      std::vector<float> got(kCount);
      ASSERT_TRUE(gpu::copy(got.data(), in.data(), kCount * 4).ok());
      ASSERT_EQ(got.front(), 3.0f) << "trial " << trial;
      ASSERT_EQ(got.back(), 3.0f) << "trial " << trial;
    }
    auto pa = PartialAllreduce::create(c, kCount, DataType::kFloat32, PartialMode::sync());
    ASSERT_TRUE(pa.ok()) << pa.status().to_string();
    ASSERT_TRUE(gpu::copy(in.data(), zeros.data(), zeros.size()).ok());
    void* s = user.value().handle();
    ASSERT_TRUE(
        gpu::copy_async(busy_dst.value().data(), busy_src.value().data(), kBusyBytes, s).ok());
    ASSERT_TRUE(gpu::copy_async(in.data(), fresh.data(), kCount * 4, s).ok());
    ASSERT_TRUE((*pa)->post(in.data(), kCount, DataType::kFloat32, CudaStream{s}).ok());
    auto r = (*pa)->wait();
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    // copy_to on the caller's stream: behind another long copy that also writes `in`.
    ASSERT_TRUE(
        gpu::copy_async(busy_dst.value().data(), busy_src.value().data(), kBusyBytes, s).ok());
    ASSERT_TRUE(gpu::copy_async(in.data(), zeros.data(), kCount * 4, s).ok());
    ASSERT_TRUE(r.value().copy_to(in.data(), CudaStream{s}).ok());
    std::vector<float> got(kCount);
    ASSERT_TRUE(gpu::copy(got.data(), in.data(), kCount * 4).ok());
    EXPECT_EQ(got.front(), 3.0f);
    EXPECT_EQ(got.back(), 3.0f);
    (*pa)->destroy();
  });
}

// Buffers of another GPU than the communicator's device are refused on every rank.
TEST(DeviceCollectives, BuffersOfAnotherDeviceAreRefused) {
  REQUIRE_GPU();
  if (gpu::query().devices.size() < 2) GTEST_SKIP() << "needs two GPUs";
  auto world = make_inproc_world(2);
  ASSERT_TRUE(world.ok());
  run_ranks(world.value(), [&](Communicator& c) {
    auto first = gpu::DeviceBuffer::allocate(64);
    ASSERT_TRUE(first.ok());
    ASSERT_TRUE(c.allreduce(first.value().data(), first.value().data(), 16, DataType::kInt32,
                            ReduceOp::kSum)
                    .ok());
    std::optional<gpu::DeviceBuffer> other;
    {
      auto scope = gpu::DeviceScope::enter(1);
      ASSERT_TRUE(scope.ok());
      auto b = gpu::DeviceBuffer::allocate(64);
      ASSERT_TRUE(b.ok());
      other.emplace(std::move(b).value());
    }
    // Rank 1 passes GPU 1's memory: both ranks' calls fail, naming the devices.
    void* buf = c.rank() == 1 ? other->data() : first.value().data();
    const Status s = c.allreduce(buf, buf, 16, DataType::kInt32, ReduceOp::kSum);
    ASSERT_FALSE(s.ok());
    if (c.rank() == 1) {
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
      EXPECT_NE(s.message().find("GPU 1"), std::string::npos) << s.message();
    }
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
