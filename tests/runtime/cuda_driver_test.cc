// Pointer classification through the CUDA driver without a context (runtime/cuda_driver.h;
// issue 19, "no CUDA for host programs"), on a stand-in driver (tests/fake_cuda/): what is asked
// while the process has no context, what is recognised once one exists, and a device buffer
// refused with a clear error where this process cannot use CUDA. The same program on a GPU
// machine checks the real driver in tests/gpu/ (a host-only program creates no context).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
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

// The process's driver is the stand-in: set before main(), before anything reads the
// environment (Config::process() reads it once, on first use).
const bool kFakeDriverChosen = setenv("EAGERCOMM_CUDA_DRIVER", EAGERCOMM_FAKE_CUDA, 1) == 0;

// The stand-in's controls, from the same loaded copy the driver uses (dlopen of one path shares
// one instance).
struct Fake {
  void* handle = dlopen(EAGERCOMM_FAKE_CUDA, RTLD_NOW | RTLD_LOCAL);
  template <class F>
  F* fn(const char* name) const {
    return reinterpret_cast<F*>(dlsym(handle, name));
  }
  void reset(int devices, int init_error = 0) const {
    fn<void(int, int)>("fake_cuda_reset")(devices, init_error);
  }
  void set_primary_active(int device, bool on) const {
    fn<void(int, int)>("fake_cuda_set_primary_active")(device, on ? 1 : 0);
  }
  void set_current(void* context) const { fn<void(void*)>("fake_cuda_set_current")(context); }
  void add_range(const void* p, size_t bytes, bool managed) const {
    fn<void(const void*, size_t, int)>("fake_cuda_add_range")(p, bytes, managed ? 1 : 0);
  }
  int pointer_queries() const { return fn<int()>("fake_cuda_pointer_queries")(); }
  int context_queries() const { return fn<int()>("fake_cuda_context_queries")(); }
  int context_creations() const { return fn<int()>("fake_cuda_context_creations")(); }
  ~Fake() {
    if (handle != nullptr) dlclose(handle);
  }
};

std::unique_ptr<gpu::CudaDriver> load_fake() {
  auto d = gpu::CudaDriver::load(EAGERCOMM_FAKE_CUDA);
  EXPECT_TRUE(d.ok()) << d.status().to_string();
  return d.ok() ? std::move(d).value() : nullptr;
}

TEST(CudaDriver, AbsentLibraryIsUnavailableAndSaysSo) {
  auto d = gpu::CudaDriver::load("libeagercomm-no-such-driver.so.1");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(d.status().message().find("libeagercomm-no-such-driver.so.1"), std::string::npos)
      << d.status().message();
}

TEST(CudaDriver, ALibraryWithoutTheEntryPointsIsRefusedByName) {
  auto d = gpu::CudaDriver::load("libm.so.6");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(d.status().message().find("cuInit"), std::string::npos) << d.status().message();
}

TEST(CudaDriver, WithoutAContextNoPointerIsAskedAbout) {
  Fake fake;
  ASSERT_NE(fake.handle, nullptr) << dlerror();
  fake.reset(2);
  auto driver = load_fake();
  ASSERT_NE(driver, nullptr);
  EXPECT_EQ(driver->device_count(), 2);
  std::vector<float> host(64), claimed(64);
  fake.add_range(claimed.data(), claimed.size() * sizeof(float), false);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(driver->classify(host.data()), MemoryKind::kHost);
    // Without a context no device memory can exist, so the driver is not asked.
    EXPECT_EQ(driver->classify(claimed.data()), MemoryKind::kHost);
  }
  EXPECT_EQ(fake.pointer_queries(), 0);
  EXPECT_GT(fake.context_queries(), 0);
  EXPECT_EQ(fake.context_creations(), 0);
  EXPECT_FALSE(driver->any_context());
}

TEST(CudaDriver, OnceAPrimaryContextIsActiveDeviceAndManagedMemoryAreRecognised) {
  Fake fake;
  fake.reset(2);
  auto driver = load_fake();
  ASSERT_NE(driver, nullptr);
  std::vector<float> host(64), device(64), managed(64);
  fake.add_range(device.data(), device.size() * sizeof(float), false);
  fake.add_range(managed.data(), managed.size() * sizeof(float), true);
  fake.set_primary_active(1, true);  // the second GPU: every device is looked at
  EXPECT_EQ(driver->classify(device.data() + 10), MemoryKind::kCuda);
  EXPECT_EQ(driver->classify(managed.data()), MemoryKind::kCuda);
  EXPECT_EQ(driver->classify(host.data()), MemoryKind::kHost);
  EXPECT_EQ(driver->classify(nullptr), MemoryKind::kHost);
  EXPECT_EQ(fake.pointer_queries(), 3);
  // Latched: the context check is not repeated per pointer once a context was seen.
  const int context_queries = fake.context_queries();
  fake.set_primary_active(1, false);
  EXPECT_EQ(driver->classify(device.data()), MemoryKind::kCuda);
  EXPECT_EQ(fake.context_queries(), context_queries);
  EXPECT_EQ(fake.context_creations(), 0);
}

TEST(CudaDriver, TheCallingThreadsCurrentContextCounts) {
  Fake fake;
  fake.reset(1);
  auto driver = load_fake();
  ASSERT_NE(driver, nullptr);
  std::vector<float> device(16);
  fake.add_range(device.data(), device.size() * sizeof(float), false);
  EXPECT_EQ(driver->classify(device.data()), MemoryKind::kHost);
  int context = 0;
  fake.set_current(&context);
  EXPECT_EQ(driver->classify(device.data()), MemoryKind::kCuda);
}

TEST(CudaDriver, ADriverThatSeesNoDeviceAnswersHostWithoutAsking) {
  Fake fake;
  fake.reset(1, /*init_error=*/100);  // CUDA_ERROR_NO_DEVICE
  auto driver = load_fake();
  ASSERT_NE(driver, nullptr);
  EXPECT_EQ(driver->device_count(), 0);
  int context = 0;
  fake.set_current(&context);
  std::vector<float> v(4);
  EXPECT_EQ(driver->classify(v.data()), MemoryKind::kHost);
  EXPECT_EQ(fake.pointer_queries(), 0);
}

TEST(CudaDriver, TheTableHasTheSwitchAndTheLibrary) {
  auto off = Config::load({{"EAGERCOMM_CUDA", "off"}, {"EAGERCOMM_CUDA_DRIVER", "/x/libcuda.so"}});
  ASSERT_TRUE(off.ok()) << off.status().to_string();
  EXPECT_FALSE(off->cuda);
  EXPECT_EQ(off->cuda_driver, "/x/libcuda.so");
  auto bad = Config::load({{"EAGERCOMM_CUDA", "maybe"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("EAGERCOMM_CUDA"), std::string::npos);
}

// The process-wide path: collectives of host buffers ask nothing about pointers while there is
// no context, and a device buffer where CUDA cannot be used is refused, naming why, on every
// rank, instead of reaching the host path (which would read device addresses as host memory).
TEST(CudaDriverInProcess, HostCollectivesAskNothingAndDeviceBuffersAreRefused) {
  ASSERT_TRUE(kFakeDriverChosen);
  Fake fake;
  fake.reset(1);
  gpu::CudaDriver* driver = gpu::process_driver();
  ASSERT_NE(driver, nullptr) << gpu::process_driver_reason();
  EXPECT_EQ(driver->library(), EAGERCOMM_FAKE_CUDA);
  if (driver->any_context()) GTEST_SKIP() << "a context was seen earlier in this process";

  auto world = make_inproc_world(2);
  ASSERT_TRUE(world.ok()) << world.status().to_string();
  run_ranks(world.value(), [](Communicator& c) {
    std::vector<float> v(256, 1.0f);
    for (int i = 0; i < 10; ++i) {
      ASSERT_TRUE(
          c.allreduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum).ok());
    }
    EXPECT_EQ(v[0], 1024.0f);
    // The forms with a stream: ignored for host buffers (this handle is no stream at all).
    const CudaStream bogus{reinterpret_cast<void*>(uintptr_t{0x1234})};
    ASSERT_TRUE(
        c.allreduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum, bogus).ok());
    EXPECT_EQ(v[0], 2048.0f);
  });
  EXPECT_EQ(fake.pointer_queries(), 0);
  EXPECT_EQ(fake.context_creations(), 0);

  if (gpu::available()) GTEST_SKIP() << "CUDA is usable here: device buffers are not refused";
  // Each rank's buffer is "device memory" to the driver from now on.
  std::vector<std::vector<float>> claimed(2, std::vector<float>(256, 1.0f));
  for (auto& b : claimed) fake.add_range(b.data(), b.size() * sizeof(float), false);
  fake.set_primary_active(0, true);
  run_ranks(world.value(), [&claimed](Communicator& c) {
    float* buf = claimed[static_cast<size_t>(c.rank())].data();
    Status s = c.allreduce(buf, buf, 256, DataType::kFloat32, ReduceOp::kSum);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.to_string();
    EXPECT_NE(s.message().find("allreduce"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("cannot use CUDA"), std::string::npos) << s.message();
    // The communicator is still good for host buffers.
    std::vector<float> v(8, 1.0f);
    EXPECT_TRUE(c.allreduce(v.data(), v.data(), 8, DataType::kFloat32, ReduceOp::kSum).ok());
    // A partial-allreduce post of a device gradient: refused the same way, nothing posted.
    auto pa = PartialAllreduce::create(c, 256, DataType::kFloat32, PartialMode::sync());
    ASSERT_TRUE(pa.ok()) << pa.status().to_string();
    Status post = (*pa)->post(buf, 256, DataType::kFloat32);
    EXPECT_EQ(post.code(), StatusCode::kUnavailable) << post.to_string();
    // The same through the forms with a stream (collectives, post).
    const CudaStream stream{reinterpret_cast<void*>(uintptr_t{0x1234})};
    EXPECT_EQ(c.allreduce(buf, buf, 256, DataType::kFloat32, ReduceOp::kSum, stream).code(),
              StatusCode::kUnavailable);
    EXPECT_EQ(c.broadcast(buf, 256, DataType::kFloat32, 0, stream).code(),
              StatusCode::kUnavailable);
    EXPECT_EQ((*pa)->post(buf, 256, DataType::kFloat32, stream).code(), StatusCode::kUnavailable);
    EXPECT_EQ((*pa)->stats().posts, 0u);
    EXPECT_TRUE(c.barrier().ok());  // both ranks posted before either object goes
  });
  EXPECT_EQ(claimed[0][0], 1.0f) << "a refused buffer is left as it was";
  EXPECT_EQ(fake.context_creations(), 0);
}

}  // namespace
}  // namespace eagercomm
