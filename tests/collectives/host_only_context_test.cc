// Issue 19, "no CUDA for host programs": a program that only ever passes host buffers creates no
// CUDA context, also on a GPU machine with the real driver (a primary context costs ~0.5 GB of
// device memory per process). Checked through the driver itself after host collectives, a
// partial allreduce and the pointer checks they make. Skips where there is no CUDA driver (the
// stand-in driver of cuda_driver_test covers the logic there); tests/gpu/one_gpu.sh runs it on
// the device machine, alone in its process.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/partial_allreduce.h"
#include "runtime/cuda_driver.h"
#include "runtime/gpu.h"
#include "tests/harness/thread_world.h"

namespace eagercomm {
namespace {

using test::run_ranks;

TEST(HostOnlyProgram, CreatesNoCudaContext) {
  gpu::CudaDriver* driver = gpu::process_driver();
  if (driver == nullptr) GTEST_SKIP() << "no CUDA driver here: " << gpu::process_driver_reason();
  if (driver->any_context()) GTEST_SKIP() << "a context existed before the test (not alone?)";
  auto world = make_inproc_world(2);
  ASSERT_TRUE(world.ok()) << world.status().to_string();
  run_ranks(world.value(), [](Communicator& c) {
    std::vector<float> v(4096, 1.0f);
    for (int i = 0; i < 20; ++i) {
      ASSERT_TRUE(
          c.allreduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum).ok());
    }
    std::vector<float> all(2 * v.size());
    ASSERT_TRUE(c.allgather(v.data(), all.data(), v.size(), DataType::kFloat32).ok());
    ASSERT_TRUE(c.broadcast(v.data(), v.size(), DataType::kFloat32, 0).ok());
    auto pa = PartialAllreduce::create(c, v.size(), DataType::kFloat32, PartialMode::solo());
    ASSERT_TRUE(pa.ok()) << pa.status().to_string();
    ASSERT_TRUE((*pa)->post(v.data(), v.size(), DataType::kFloat32).ok());
    ASSERT_TRUE((*pa)->flush([](RoundResult&&) {}).ok());
    (*pa)->destroy();
  });
  EXPECT_EQ(gpu::detected_kind(world.value()[0].get()), MemoryKind::kHost);
  EXPECT_FALSE(driver->any_context())
      << "host collectives created a CUDA context (device memory and start-up time per process)";
}

}  // namespace
}  // namespace eagercomm
