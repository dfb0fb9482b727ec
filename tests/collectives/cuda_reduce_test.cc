// The CUDA reduction kernels against the CPU kernels, bit for bit, on a GPU (skipped without
// one: the skip message says why). tests/gpu/run.sh runs this on GPU machines.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "collectives/cuda/cuda_reduce.h"
#include "collectives/kernels/reduce_kernels.h"
#include "runtime/gpu.h"

namespace eagercomm {
namespace {

#define REQUIRE_GPU()                                                       \
  do {                                                                      \
    const gpu::Inventory inv = gpu::query();                                \
    if (!cuda::reduce_built()) GTEST_SKIP() << "this build has no CUDA";    \
    if (inv.devices.empty()) GTEST_SKIP() << "no GPU here: " << inv.reason; \
  } while (0)

// Random bytes of `count` elements of `type`, with the special values spread in: NaNs, both
// zeros, infinities, subnormals (whatever the bit patterns mean for the type).
std::vector<uint8_t> inputs(DataType type, size_t count, uint32_t seed) {
  const size_t width = dtype_size(type);
  std::vector<uint8_t> out(count * width);
  std::mt19937 rng(seed);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  if (type == DataType::kFloat32) {
    const float special[] = {0.0f,
                             -0.0f,
                             std::numeric_limits<float>::quiet_NaN(),
                             std::numeric_limits<float>::infinity(),
                             1e-40f,
                             -1e-40f,
                             1.5f};
    for (size_t i = 0; i < count; i += 3) {
      std::memcpy(&out[i * 4], &special[(i / 3 + seed) % 7], 4);
    }
  }
  return out;
}

TEST(CudaReduce, MatchesTheCpuKernelsBitForBit) {
  REQUIRE_GPU();
  constexpr size_t kCount = (1 << 16) + 7;  // not a multiple of any block size
  for (DataType type : kAllDataTypes) {
    for (ReduceOp op : kAllReduceOps) {
      const size_t bytes = kCount * dtype_size(type);
      const std::vector<uint8_t> a = inputs(type, kCount, 1), b = inputs(type, kCount, 2);
      std::vector<uint8_t> want(bytes), got(bytes);
      reduce(type, op, want.data(), a.data(), b.data(), kCount);
      auto da = gpu::DeviceBuffer::allocate(bytes);
      auto db = gpu::DeviceBuffer::allocate(bytes);
      auto dout = gpu::DeviceBuffer::allocate(bytes);
      ASSERT_TRUE(da.ok() && db.ok() && dout.ok()) << da.status().to_string();
      ASSERT_TRUE(gpu::copy(da.value().data(), a.data(), bytes).ok());
      ASSERT_TRUE(gpu::copy(db.value().data(), b.data(), bytes).ok());
      ASSERT_TRUE(cuda::reduce(type, op, dout.value().data(), da.value().data(), db.value().data(),
                               kCount, nullptr)
                      .ok());
      ASSERT_TRUE(gpu::copy(got.data(), dout.value().data(), bytes).ok());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), bytes), 0)
          << dtype_name(type) << " " << reduce_op_name(op);
      // In place: out aliases a.
      ASSERT_TRUE(cuda::reduce(type, op, da.value().data(), da.value().data(), db.value().data(),
                               kCount, nullptr)
                      .ok());
      ASSERT_TRUE(gpu::copy(got.data(), da.value().data(), bytes).ok());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), bytes), 0) << "in place";
      EXPECT_EQ(gpu::detected_kind(da.value().data()), MemoryKind::kCuda);
      EXPECT_FALSE(gpu::check_buffer_kind(da.value().data(), MemoryKind::kHost, "x").ok());
    }
  }
}

// Bandwidth of a 64 MiB f32 sum (two reads, one write), printed for tests/gpu/run.sh.
TEST(CudaReduce, Bandwidth) {
  REQUIRE_GPU();
  constexpr size_t kCount = 16 << 20;
  const size_t bytes = kCount * 4;
  auto a = gpu::DeviceBuffer::allocate(bytes);
  auto b = gpu::DeviceBuffer::allocate(bytes);
  ASSERT_TRUE(a.ok() && b.ok());
  for (int warm = 0; warm < 3; ++warm) {
    ASSERT_TRUE(cuda::reduce(DataType::kFloat32, ReduceOp::kSum, a.value().data(), a.value().data(),
                             b.value().data(), kCount, nullptr)
                    .ok());
  }
  ASSERT_TRUE(gpu::synchronize().ok());
  constexpr int kIters = 50;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kIters; ++i) {
    ASSERT_TRUE(cuda::reduce(DataType::kFloat32, ReduceOp::kSum, a.value().data(), a.value().data(),
                             b.value().data(), kCount, nullptr)
                    .ok());
  }
  ASSERT_TRUE(gpu::synchronize().ok());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("cuda_reduce_bandwidth_gbps %.1f (64 MiB f32 sum, 3 x 64 MiB moved per call)\n",
              3.0 * bytes * kIters / s / 1e9);
}

TEST(CudaReduce, WithoutAGpuItSaysSo) {
  if (!gpu::query().devices.empty()) GTEST_SKIP() << "a GPU is here";
  auto buf = gpu::DeviceBuffer::allocate(64);
  ASSERT_FALSE(buf.ok());
  EXPECT_EQ(buf.status().code(), StatusCode::kUnavailable) << buf.status().to_string();
}

}  // namespace
}  // namespace eagercomm
