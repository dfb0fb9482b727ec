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

GpuDirectChoice choose_gpudirect(const GpuDirectProbe& p) {
  GpuDirectChoice c;
  if (!p.gpu) {
    c.why = "no GPU here: nothing to register";
    return c;
  }
  if (!p.rdma_device) {
    c.why = "no RDMA device here: GPU buffers would be staged through host memory";
    return c;
  }
  if (p.verbs_dmabuf && p.cuda_dmabuf) {
    c.method = GpuDirectMethod::kDmaBuf;
    c.why = "libibverbs and the GPU driver both support dma-buf";
    return c;
  }
  if (p.peer_memory_module) {
    c.method = GpuDirectMethod::kPeerMemory;
    c.why = p.verbs_dmabuf ? "the GPU driver exports no dma-buf; nvidia_peermem is loaded"
                           : "libibverbs has no ibv_reg_dmabuf_mr; nvidia_peermem is loaded";
    return c;
  }
  c.why = std::string("no GPUDirect path: ") +
          (p.verbs_dmabuf ? "the GPU driver exports no dma-buf" : "libibverbs lacks dma-buf") +
          " and no peer-memory module is loaded (modprobe nvidia_peermem); staging through "
          "pinned host memory";
  return c;
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

}  // namespace eagercomm::verbs
