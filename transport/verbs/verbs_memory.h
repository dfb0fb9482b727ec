// Internal: memory registration of the verbs transport (verbs_transport.h). Not installed.
//
// allocate() and register_memory() register host memory with ibv_reg_mr (local write, remote
// write), the emulated device's memory as GPU memory, and GPU memory for GPUDirect RDMA by the
// method gpudirect.h chooses (dma-buf, the peer-memory module, or staging through pinned host
// memory). Each region carries its key (verbs_wire.h: owner, instance, address, rkey, kind),
// which import_region() turns into a VerbsRemote on the peer.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <vector>

#include "runtime/gpu.h"
#include "runtime/status.h"
#include "transport/transport.h"
#include "transport/verbs/gpudirect.h"
#include "transport/verbs/verbs_api.h"
#include "transport/verbs/verbs_wire.h"

namespace eagercomm::verbs {

// The device context and protection domain: shared by the transport and its regions (a region
// may outlive the transport and must deregister before the domain goes).
struct Core {
  explicit Core(const VerbsApi& functions) : api(functions) {}
  Core(const Core&) = delete;
  Core& operator=(const Core&) = delete;
  const VerbsApi& api;  // the process's rdma-core (or the emulated device): outlives us
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ~Core() {
    if (pd != nullptr) api.dealloc_pd(pd);
    if (ctx != nullptr) api.close_device(ctx);
  }
};

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// Memory behind a region: host memory (owned or the caller's), GPU memory the NIC reaches
// directly, or GPU memory with a pinned host copy the NIC reaches instead (staging).
struct RegionMemory {
  std::unique_ptr<void, FreeDeleter> host;   // allocate() of host memory
  std::optional<gpu::DeviceBuffer> device;   // allocate() of GPU memory
  std::optional<gpu::PinnedBuffer> staging;  // what the NIC reads and writes when staged
};

class VerbsRegion final : public MemoryRegion {
 public:
  VerbsRegion(std::shared_ptr<Core> core, ibv_mr* mr, RegionMemory memory, void* data, size_t size,
              MemoryKind kind, std::vector<uint8_t> key)
      : MemoryRegion(data, size, kind),
        core_(std::move(core)),
        mr_(mr),
        memory_(std::move(memory)) {
    remote_key_ = std::move(key);
  }
  ~VerbsRegion() override { core_->api.dereg_mr(mr_); }  // before the memory members go
  uint32_t lkey() const { return mr_->lkey; }
  uint32_t rkey() const { return mr_->rkey; }
  const Core* core() const { return core_.get(); }
  // Where the NIC reads this region's bytes: the staging copy when there is one.
  uint64_t nic_address() const {
    return reinterpret_cast<uintptr_t>(memory_.staging ? memory_.staging->data() : data());
  }
  bool staged() const { return memory_.staging.has_value(); }

 private:
  std::shared_ptr<Core> core_;
  ibv_mr* mr_;
  RegionMemory memory_;
};

class VerbsRemote final : public RemoteRegion {
 public:
  VerbsRemote(const Core* core, int peer, const RegionKey& k)
      : RemoteRegion(peer, k.length), core_(core), addr_(k.addr), rkey_(k.rkey) {}
  const Core* core() const { return core_; }
  uint64_t addr() const { return addr_; }
  uint32_t rkey() const { return rkey_; }

 private:
  const Core* core_;
  uint64_t addr_;
  uint32_t rkey_;
};

// Registers memory with one transport's protection domain (the core's, once it is open) and
// keys it as rank `rank`'s, transport instance `instance`. Remembers what GPUDirect needs: the
// method that works here and the GPUs whose NIC writes must be flushed before a notification.
class MemoryRegistrar {
 public:
  MemoryRegistrar(std::shared_ptr<Core> core, int rank, uint64_t instance)
      : core_(std::move(core)), rank_(rank), instance_(instance) {}

  // The Transport calls of the same names.
  Result<std::unique_ptr<MemoryRegion>> allocate(size_t bytes, MemoryKind kind);
  Result<std::unique_ptr<MemoryRegion>> register_memory(void* data, size_t bytes, MemoryKind kind);

  // GPUs whose memory was registered for the NIC to write into and that need the GPUDirect
  // flush before a notification (defect 4: per owning device, as its attributes say).
  const std::vector<int>& flush_devices() const { return flush_devices_; }

 private:
  // Host memory, or (kCuda) the emulated device's memory.
  Result<std::unique_ptr<MemoryRegion>> make_region(void* data, size_t bytes, RegionMemory memory,
                                                    MemoryKind kind = MemoryKind::kHost);
  Result<std::unique_ptr<MemoryRegion>> make_cuda_region(void* data, size_t bytes,
                                                         RegionMemory memory);
  // Looks at the GPU owning `data` once: whether NIC writes into it need the flush (defect 4).
  Status note_gpudirect_device(const void* data);

  std::shared_ptr<Core> core_;
  int rank_;
  uint64_t instance_;
  // GPUDirect (gpudirect.h): probed at the first GPU registration; methods that failed here.
  std::optional<GpuDirectProbe> gpu_probe_;
  std::vector<GpuDirectFailure> gpu_failures_;
  std::optional<GpuDirectMethod> gpu_logged_;  // the method whose line was logged
  std::vector<int> flush_devices_;
  std::vector<int> gpu_devices_seen_;  // whose attributes were looked at (and logged)
};

}  // namespace eagercomm::verbs
