// Device-free parts of the GPU paths (issue #6): the GPUDirect method choice, the memory-kind
// check, and what the GPU queries answer on a machine without a GPU. The kernels themselves are
// tested on a GPU by tests/gpu/ (tests/gpu/run.sh).
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "collectives/cuda/cuda_reduce.h"
#include "runtime/gpu.h"
#include "transport/verbs/gpudirect.h"

namespace eagercomm {
namespace {

using verbs::GpuDirectMethod;
using verbs::GpuDirectProbe;

TEST(GpuDirect, PrefersDmaBufThenPeerMemoryThenStaging) {
  GpuDirectProbe p{.gpu = true,
                   .verbs_dmabuf = true,
                   .cuda_dmabuf = true,
                   .peer_memory_module = true,
                   .rdma_device = true};
  EXPECT_EQ(verbs::choose_gpudirect(p).method, GpuDirectMethod::kDmaBuf);
  p.cuda_dmabuf = false;
  auto c = verbs::choose_gpudirect(p);
  EXPECT_EQ(c.method, GpuDirectMethod::kPeerMemory);
  EXPECT_NE(c.why.find("exports no dma-buf"), std::string::npos) << c.why;
  p.verbs_dmabuf = false;
  p.cuda_dmabuf = true;
  c = verbs::choose_gpudirect(p);
  EXPECT_EQ(c.method, GpuDirectMethod::kPeerMemory);
  EXPECT_NE(c.why.find("no ibv_reg_dmabuf_mr"), std::string::npos) << c.why;
  p.peer_memory_module = false;
  c = verbs::choose_gpudirect(p);
  EXPECT_EQ(c.method, GpuDirectMethod::kStaging);
  EXPECT_NE(c.why.find("modprobe nvidia_peermem"), std::string::npos) << c.why;
}

TEST(GpuDirect, NothingToDoWithoutAGpuOrAnRdmaDevice) {
  GpuDirectProbe p{.gpu = false,
                   .verbs_dmabuf = true,
                   .cuda_dmabuf = true,
                   .peer_memory_module = true,
                   .rdma_device = true};
  auto c = verbs::choose_gpudirect(p);
  EXPECT_EQ(c.method, GpuDirectMethod::kStaging);
  EXPECT_NE(c.why.find("no GPU"), std::string::npos);
  p.gpu = true;
  p.rdma_device = false;
  c = verbs::choose_gpudirect(p);
  EXPECT_EQ(c.method, GpuDirectMethod::kStaging);
  EXPECT_NE(c.why.find("no RDMA device"), std::string::npos);
}

TEST(GpuDirect, FailedMethodsAreSkippedAndStagingNamesEveryReason) {
  const GpuDirectProbe all{.gpu = true,
                           .verbs_dmabuf = true,
                           .cuda_dmabuf = true,
                           .peer_memory_module = true,
                           .rdma_device = true};
  std::vector<verbs::GpuDirectFailure> failed = {
      {GpuDirectMethod::kDmaBuf, "ibv_reg_dmabuf_mr: Operation not supported"}};
  auto c = verbs::choose_gpudirect(all, failed);
  EXPECT_EQ(c.method, GpuDirectMethod::kPeerMemory);
  EXPECT_NE(c.why.find("ibv_reg_dmabuf_mr failed (ibv_reg_dmabuf_mr: Operation not supported)"),
            std::string::npos)
      << c.why;
  failed.push_back({GpuDirectMethod::kPeerMemory, "ibv_reg_mr: Bad address"});
  c = verbs::choose_gpudirect(all, failed);
  EXPECT_EQ(c.method, GpuDirectMethod::kStaging);
  EXPECT_NE(c.why.find("Operation not supported"), std::string::npos) << c.why;
  EXPECT_NE(c.why.find("peer-memory module failed (ibv_reg_mr: Bad address)"), std::string::npos)
      << c.why;
  const std::string line = verbs::gpudirect_log_line(c);
  EXPECT_EQ(line.rfind("verbs: GPU memory is staged through pinned host memory: no GPUDirect", 0),
            0u)
      << line;
  // Only the peer-memory path failed: dma-buf is still first.
  c = verbs::choose_gpudirect(all, std::span(failed).subspan(1));
  EXPECT_EQ(c.method, GpuDirectMethod::kDmaBuf);
  EXPECT_EQ(verbs::gpudirect_log_line(c),
            "verbs: GPU memory is registered by dma-buf (ibv_reg_dmabuf_mr): libibverbs and the "
            "GPU driver both support dma-buf");
}

// Defect 4 of issue 18: the flush ran whatever the device's attributes said (and on the
// polling thread's device). The choice follows the owning device's attributes.
TEST(GpuDirectFlush, FollowsTheDevicesOrderingAndFlushAttributes) {
  using verbs::GpuDirectFlush;
  // cudaGPUDirectRDMAWritesOrdering: None 0, Owner 100, AllDevices 200;
  // cudaFlushGPUDirectRDMAWritesOptions: Host 1, MemOps 2.
  EXPECT_EQ(verbs::choose_gpudirect_flush(100, 0).action, GpuDirectFlush::kNotNeeded);
  EXPECT_EQ(verbs::choose_gpudirect_flush(200, 3).action, GpuDirectFlush::kNotNeeded);
  EXPECT_EQ(verbs::choose_gpudirect_flush(0, 1).action, GpuDirectFlush::kFlush);
  EXPECT_EQ(verbs::choose_gpudirect_flush(0, 3).action, GpuDirectFlush::kFlush);
  const verbs::GpuDirectFlushChoice none = verbs::choose_gpudirect_flush(0, 2);
  EXPECT_EQ(none.action, GpuDirectFlush::kUnsupported) << "MemOps only: no host-side flush";
  EXPECT_NE(none.why.find("not see"), std::string::npos) << none.why;
  EXPECT_EQ(verbs::choose_gpudirect_flush(0, 0).action, GpuDirectFlush::kUnsupported);
}

// The GPU helpers the transports use, on a machine without a GPU: clear errors, no crash.
TEST(GpuHelpers, WithoutAGpuEveryCallSaysSo) {
  if (!gpu::query().devices.empty()) GTEST_SKIP() << "a GPU is present: tests/gpu/ covers these";
  std::vector<uint8_t> host(4096);
  const auto unavailable = [](const Status& s, const char* what) {
    EXPECT_FALSE(s.ok()) << what;
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << what << ": " << s.to_string();
    std::printf("%s without a GPU: %s\n", what, s.to_string().c_str());
  };
  unavailable(gpu::export_dmabuf(host.data(), host.size()).status(), "export_dmabuf");
  unavailable(gpu::PinnedBuffer::allocate(4096).status(), "PinnedBuffer::allocate");
  unavailable(gpu::ipc_export(host.data()).status(), "ipc_export");
  unavailable(gpu::IpcMapping::open(gpu::IpcHandle{}).status(), "IpcMapping::open");
  unavailable(gpu::flush_rdma_writes(0), "flush_rdma_writes");
  unavailable(gpu::rdma_write_caps(0).status(), "rdma_write_caps");
  int on_stack = 0;
  unavailable(gpu::device_of(&on_stack).status(), "device_of");
  unavailable(gpu::zero(host.data(), 16), "zero");
}

TEST(GpuMemoryKind, MismatchesAreNamedBothWays) {
  EXPECT_TRUE(gpu::check_kind(MemoryKind::kHost, MemoryKind::kHost, "x").ok());
  EXPECT_TRUE(gpu::check_kind(MemoryKind::kCuda, MemoryKind::kCuda, "x").ok());
  Status s = gpu::check_kind(MemoryKind::kHost, MemoryKind::kCuda, "eager SGD parameters");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("eager SGD parameters: the buffer is CUDA device memory but was "
                             "passed as host memory"),
            std::string::npos)
      << s.message();
  s = gpu::check_kind(MemoryKind::kCuda, MemoryKind::kHost, "send buffer");
  EXPECT_NE(s.message().find("send buffer: the buffer was passed as CUDA memory"),
            std::string::npos)
      << s.message();
}

TEST(GpuMemoryKind, HostMemoryIsHostMemory) {
  std::vector<float> v(16);
  EXPECT_EQ(gpu::detected_kind(v.data()), MemoryKind::kHost);
  EXPECT_EQ(gpu::detected_kind(nullptr), MemoryKind::kHost);
  EXPECT_TRUE(gpu::check_buffer_kind(v.data(), MemoryKind::kHost, "host vector").ok());
  EXPECT_FALSE(gpu::check_buffer_kind(v.data(), MemoryKind::kCuda, "host vector").ok());
}

// On this machine: either GPUs (each with a name) or a reason; the kernels refuse to run
// without one, with a clear error rather than a crash.
TEST(GpuInventory, ListsGpusOrSaysWhyNone) {
  const gpu::Inventory inv = gpu::query();
  if (!inv.devices.empty()) {
    for (const gpu::Device& d : inv.devices) EXPECT_FALSE(d.name.empty());
    return;
  }
  EXPECT_FALSE(inv.reason.empty());
  std::printf("no GPU here: %s\n", inv.reason.c_str());
  std::vector<float> a(4), b(4), out(4);
  const Status s =
      cuda::reduce(DataType::kFloat32, ReduceOp::kSum, out.data(), a.data(), b.data(), 4, nullptr);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kNotSupported)
      << s.to_string();
  std::printf("cuda::reduce without a GPU: %s\n", s.to_string().c_str());
}

}  // namespace
}  // namespace eagercomm
