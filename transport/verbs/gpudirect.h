// How the verbs transport would reach GPU memory (issue #6, GPUDirect RDMA): register it with
// ibv_reg_dmabuf_mr on a dma-buf the CUDA driver exports, else with plain ibv_reg_mr through the
// peer-memory kernel module (nvidia_peermem, or the older nv_peer_mem), else stage through
// pinned host memory. The choice is pure (tested with every combination); probe_gpudirect()
// looks at this machine, and the transport logs the staging fallback once at info level.
#pragma once

#include <span>
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

// A method the transport tried on a buffer and that failed there (ibv_reg_dmabuf_mr refused the
// fd, ibv_reg_mr of device memory failed without a working peer-memory module, ...).
struct GpuDirectFailure {
  GpuDirectMethod method;
  std::string error;
};

// The method to try next: the best one the probe allows that has not failed yet; staging when
// none is left, with every reason (unavailable or failed) in `why`.
GpuDirectChoice choose_gpudirect(const GpuDirectProbe& probe,
                                 std::span<const GpuDirectFailure> failed = {});
// The line the transport logs (once, at info level) for the method in use:
// "verbs: GPU memory is registered by dma-buf (ibv_reg_dmabuf_mr): <why>" or
// "verbs: GPU memory is staged through pinned host memory: <why>".
std::string gpudirect_log_line(const GpuDirectChoice& choice);
GpuDirectProbe probe_gpudirect();

// What must follow a NIC's writes into a GPU's memory before a notification lets a consumer
// launch work that reads them (issue 18, defect 4), from the device's attributes
// (gpu::rdma_write_caps): nothing where the device orders such writes for its own work
// (cudaDevAttrGPUDirectRDMAWritesOrdering >= owner), cudaDeviceFlushGPUDirectRDMAWrites where
// cudaDevAttrGPUDirectRDMAFlushWritesOptions offers it from the host, else nothing can be done
// from here (logged once per device: the consumer may read data not yet visible).
enum class GpuDirectFlush { kNotNeeded, kFlush, kUnsupported };
struct GpuDirectFlushChoice {
  GpuDirectFlush action = GpuDirectFlush::kUnsupported;
  std::string why;
};
GpuDirectFlushChoice choose_gpudirect_flush(int ordering, int flush_options);

}  // namespace eagercomm::verbs
