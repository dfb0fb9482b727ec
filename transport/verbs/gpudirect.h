// How the verbs transport would reach GPU memory (issue #6, GPUDirect RDMA): register it with
// ibv_reg_dmabuf_mr on a dma-buf the CUDA driver exports, else with plain ibv_reg_mr through the
// peer-memory kernel module (nvidia_peermem, or the older nv_peer_mem), else stage through
// pinned host memory. The choice is pure (tested with every combination); probe_gpudirect()
// looks at this machine, and the transport logs the staging fallback once at info level.
#pragma once

#include <string>

namespace eagercomm::verbs {

enum class GpuDirectMethod { kDmaBuf, kPeerMemory, kStaging };
const char* gpudirect_method_name(GpuDirectMethod m);

struct GpuDirectProbe {
  bool gpu = false;                 // a CUDA device is present
  bool verbs_dmabuf = false;        // libibverbs has ibv_reg_dmabuf_mr (rdma-core >= 34)
  bool cuda_dmabuf = false;         // the GPU's driver exports dma-buf handles
  bool peer_memory_module = false;  // nvidia_peermem / nv_peer_mem is loaded
  bool rdma_device = false;         // there is an RDMA port at all
};

struct GpuDirectChoice {
  GpuDirectMethod method = GpuDirectMethod::kStaging;
  std::string why;  // one line: what was found and why this method
};

GpuDirectChoice choose_gpudirect(const GpuDirectProbe& probe);
GpuDirectProbe probe_gpudirect();

}  // namespace eagercomm::verbs
