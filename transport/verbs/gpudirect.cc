#include "transport/verbs/gpudirect.h"

#include <sys/stat.h>

#include "runtime/build_config.h"
#include "runtime/gpu.h"
#include "transport/verbs/verbs_device.h"

namespace eagercomm::verbs {
namespace {

bool exists(const char* path) {
  struct stat st;
  return ::stat(path, &st) == 0;
}

}  // namespace

const char* gpudirect_method_name(GpuDirectMethod m) {
  switch (m) {
    case GpuDirectMethod::kDmaBuf:
      return "dma-buf (ibv_reg_dmabuf_mr)";
    case GpuDirectMethod::kPeerMemory:
      return "peer memory (ibv_reg_mr with nvidia_peermem)";
    case GpuDirectMethod::kStaging:
      break;
  }
  return "staging through pinned host memory";
}

GpuDirectChoice choose_gpudirect(const GpuDirectProbe& p,
                                 std::span<const GpuDirectFailure> failed) {
  GpuDirectChoice c;
  if (!p.gpu) {
    c.why = "no GPU here: nothing to register";
    return c;
  }
  if (!p.rdma_device) {
    c.why = "no RDMA device here: GPU buffers would be staged through host memory";
    return c;
  }
  const auto failure = [&failed](GpuDirectMethod m) -> const GpuDirectFailure* {
    for (const GpuDirectFailure& f : failed) {
      if (f.method == m) return &f;
    }
    return nullptr;
  };
  const GpuDirectFailure* dmabuf_failed = failure(GpuDirectMethod::kDmaBuf);
  const GpuDirectFailure* peer_failed = failure(GpuDirectMethod::kPeerMemory);
  const bool dmabuf = p.verbs_dmabuf && p.cuda_dmabuf;
  if (dmabuf && dmabuf_failed == nullptr) {
    c.method = GpuDirectMethod::kDmaBuf;
    c.why = "libibverbs and the GPU driver both support dma-buf";
    return c;
  }
  // Why dma-buf is out, for the lines below.
  const std::string no_dmabuf =
      dmabuf_failed != nullptr ? "ibv_reg_dmabuf_mr failed (" + dmabuf_failed->error + ")"
      : p.verbs_dmabuf         ? std::string("the GPU driver exports no dma-buf")
                               : std::string("libibverbs has no ibv_reg_dmabuf_mr");
  if (p.peer_memory_module && peer_failed == nullptr) {
    c.method = GpuDirectMethod::kPeerMemory;
    c.why = no_dmabuf + "; nvidia_peermem is loaded";
    return c;
  }
  const std::string no_peer =
      peer_failed != nullptr
          ? "ibv_reg_mr of GPU memory through the peer-memory module failed (" +
                peer_failed->error + ")"
          : std::string("no peer-memory module is loaded (modprobe nvidia_peermem)");
  c.why = "no GPUDirect path: " + no_dmabuf + " and " + no_peer +
          "; staging through pinned host memory";
  return c;
}

std::string gpudirect_log_line(const GpuDirectChoice& c) {
  if (c.method == GpuDirectMethod::kStaging) {
    return "verbs: GPU memory is staged through pinned host memory: " + c.why;
  }
  return std::string("verbs: GPU memory is registered by ") + gpudirect_method_name(c.method) +
         ": " + c.why;
}

GpuDirectProbe probe_gpudirect() {
  GpuDirectProbe p;
  const gpu::Inventory inv = gpu::query();
  p.gpu = !inv.devices.empty();
  for (const gpu::Device& d : inv.devices) p.cuda_dmabuf = p.cuda_dmabuf || d.dmabuf;
  p.verbs_dmabuf = EAGERCOMM_HAVE_VERBS != 0;  // rdma-core 34+ (Debian 12 has 44)
  p.peer_memory_module = exists("/sys/module/nvidia_peermem") || exists("/sys/module/nv_peer_mem");
  p.rdma_device = !list_verbs_devices().devices.empty();
  return p;
}

GpuDirectFlushChoice choose_gpudirect_flush(int ordering, int flush_options) {
  // CUDA's values (cuda_runtime_api.h), spelled here so the choice builds without CUDA:
  // cudaGPUDirectRDMAWritesOrderingOwner and cudaFlushGPUDirectRDMAWritesOptionHost.
  constexpr int kOrderingOwner = 100;
  constexpr int kFlushFromHost = 1 << 0;
  if (ordering >= kOrderingOwner) {
    return {GpuDirectFlush::kNotNeeded,
            "the device orders NIC writes for its own work (GPUDirectRDMAWritesOrdering " +
                std::to_string(ordering) + ")"};
  }
  if (flush_options & kFlushFromHost) {
    return {GpuDirectFlush::kFlush,
            "cudaDeviceFlushGPUDirectRDMAWrites before each notification (the device does not "
            "order NIC writes itself)"};
  }
  return {GpuDirectFlush::kUnsupported,
          "the device neither orders NIC writes for its own work nor offers "
          "cudaDeviceFlushGPUDirectRDMAWrites (GPUDirectRDMAFlushWritesOptions " +
              std::to_string(flush_options) +
              "): a kernel launched on a notification may read data the NIC wrote but the GPU "
              "does not see yet"};
}

}  // namespace eagercomm::verbs
