// Memory registration of the verbs transport (verbs_memory.h).
#include "transport/verbs/verbs_memory.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "transport/transport_log.h"
#include "transport/verbs/verbs_qp_settings.h"

namespace eagercomm::verbs {

Result<std::unique_ptr<MemoryRegion>> MemoryRegistrar::make_region(void* data, size_t bytes,
                                                                   RegionMemory memory,
                                                                   MemoryKind kind) {
  ibv_mr* mr = core_->api.reg_mr(core_->pd, data, bytes, kQpAccess);
  if (mr == nullptr) {
    return make_status(errno == ENOMEM ? StatusCode::kNoMemory : StatusCode::kIoError,
                       "verbs: registering %zu bytes at %p failed: %s (locked-memory limit? see "
                       "ulimit -l)",
                       bytes, data, errno_text().c_str());
  }
  RegionKey k;
  k.owner = rank_;
  k.instance = instance_;
  k.addr = reinterpret_cast<uintptr_t>(data);
  k.length = bytes;
  k.rkey = mr->rkey;
  if (kind == MemoryKind::kCuda) k.kind = KeyKind::kCuda;
  return std::unique_ptr<MemoryRegion>(std::make_unique<VerbsRegion>(
      core_, mr, std::move(memory), data, bytes, kind, encode_key(k)));
}

// GPU memory (issue #6, GPUDirect RDMA): dma-buf first, then ibv_reg_mr through the peer-memory
// module, then staging through pinned host memory. The choice is gpudirect.h's; a method that
// fails here is not tried again, and the method in use is logged once at info level whenever it
// changes (never a silent fallback).
Result<std::unique_ptr<MemoryRegion>> MemoryRegistrar::make_cuda_region(void* data, size_t bytes,
                                                                        RegionMemory memory) {
  if (!gpu_probe_) {
    gpu_probe_ = probe_gpudirect();
    gpu_probe_->rdma_device = true;                                  // this transport has one open
    gpu_probe_->verbs_dmabuf = core_->api.reg_dmabuf_mr != nullptr;  // rdma-core 34+
  }
  constexpr int kAccess = kQpAccess;
  for (;;) {
    const GpuDirectChoice choice = choose_gpudirect(*gpu_probe_, gpu_failures_);
    if (!gpu_probe_->gpu) {
      return make_status(StatusCode::kUnavailable, "verbs: GPU memory without a GPU: %s",
                         choice.why.c_str());
    }
    if (gpu_logged_ != choice.method) {
      EC_INFO(kNet, "%s", gpudirect_log_line(choice).c_str());
      gpu_logged_ = choice.method;
    }
    ibv_mr* mr = nullptr;
    KeyKind kind = KeyKind::kCuda;
    void* nic = data;
    switch (choice.method) {
      case GpuDirectMethod::kDmaBuf: {
        auto buf = gpu::export_dmabuf(data, bytes);
        if (!buf.ok()) {
          gpu_failures_.push_back({choice.method, std::string(buf.status().message())});
          continue;
        }
        // The MR keeps its own reference to the dma-buf: the fd closes when `buf` goes.
        mr = core_->api.reg_dmabuf_mr(core_->pd, buf.value().offset, bytes,
                                      reinterpret_cast<uintptr_t>(data), buf.value().fd.get(),
                                      kAccess);
        if (mr == nullptr) {
          gpu_failures_.push_back({choice.method, "ibv_reg_dmabuf_mr: " + errno_text()});
          continue;
        }
        break;
      }
      case GpuDirectMethod::kPeerMemory:
        mr = core_->api.reg_mr(core_->pd, data, bytes, kAccess);
        if (mr == nullptr) {
          gpu_failures_.push_back({choice.method, "ibv_reg_mr: " + errno_text()});
          continue;
        }
        break;
      case GpuDirectMethod::kStaging: {
        EC_ASSIGN_OR_RETURN(gpu::PinnedBuffer pinned, gpu::PinnedBuffer::allocate(bytes));
        nic = pinned.data();
        mr = core_->api.reg_mr(core_->pd, nic, bytes, kAccess);
        if (mr == nullptr) {
          return make_status(StatusCode::kIoError,
                             "verbs: registering the %zu-byte pinned staging copy of GPU memory "
                             "failed: %s",
                             bytes, errno_text().c_str());
        }
        memory.staging = std::move(pinned);
        kind = KeyKind::kCudaStaged;
        break;
      }
    }
    if (kind == KeyKind::kCuda) {
      if (Status s = note_gpudirect_device(data); !s.ok()) {
        core_->api.dereg_mr(mr);
        return s;
      }
    }
    RegionKey k;
    k.owner = rank_;
    k.instance = instance_;
    k.addr = reinterpret_cast<uintptr_t>(nic);
    k.length = bytes;
    k.rkey = mr->rkey;
    k.kind = kind;
    return std::unique_ptr<MemoryRegion>(std::make_unique<VerbsRegion>(
        core_, mr, std::move(memory), data, bytes, MemoryKind::kCuda, encode_key(k)));
  }
}

Status MemoryRegistrar::note_gpudirect_device(const void* data) {
  EC_ASSIGN_OR_RETURN(const int device, gpu::device_of(data));
  if (std::find(gpu_devices_seen_.begin(), gpu_devices_seen_.end(), device) !=
      gpu_devices_seen_.end()) {
    return Status::Ok();
  }
  gpu_devices_seen_.push_back(device);
  EC_ASSIGN_OR_RETURN(const gpu::RdmaWriteCaps caps, gpu::rdma_write_caps(device));
  const GpuDirectFlushChoice choice = choose_gpudirect_flush(caps.ordering, caps.flush_options);
  switch (choice.action) {
    case GpuDirectFlush::kNotNeeded:
      EC_INFO(kNet, "verbs: GPU %d: no GPUDirect flush: %s", device, choice.why.c_str());
      break;
    case GpuDirectFlush::kFlush:
      EC_INFO(kNet, "verbs: GPU %d: %s", device, choice.why.c_str());
      flush_devices_.push_back(device);
      break;
    case GpuDirectFlush::kUnsupported:
      EC_WARN(kNet, "verbs: GPU %d: %s", device, choice.why.c_str());
      break;
  }
  return Status::Ok();
}

Result<std::unique_ptr<MemoryRegion>> MemoryRegistrar::allocate(size_t bytes, MemoryKind kind) {
  if (bytes == 0) return Status(StatusCode::kInvalidArgument, "verbs: allocate of 0 bytes");
  if (kind == MemoryKind::kCuda) {
    EC_ASSIGN_OR_RETURN(gpu::DeviceBuffer buffer, gpu::DeviceBuffer::allocate(bytes));
    EC_RETURN_IF_ERROR(gpu::zero(buffer.data(), bytes));
    void* data = buffer.data();
    RegionMemory memory;
    memory.device = std::move(buffer);
    return make_cuda_region(data, bytes, std::move(memory));
  }
  const size_t rounded = (bytes + 4095) / 4096 * 4096;
  void* p = std::aligned_alloc(4096, rounded);
  if (p == nullptr) {
    return make_status(StatusCode::kNoMemory, "verbs: cannot allocate %zu bytes", bytes);
  }
  std::memset(p, 0, rounded);
  RegionMemory memory;
  memory.host.reset(p);
  return make_region(p, bytes, std::move(memory));
}

Result<std::unique_ptr<MemoryRegion>> MemoryRegistrar::register_memory(void* data, size_t bytes,
                                                                       MemoryKind kind) {
  if (data == nullptr || bytes == 0) {
    return Status(StatusCode::kInvalidArgument, "verbs: register_memory of an empty range");
  }
  // A device pointer passed as host memory (or the reverse) would fault in the NIC's driver or
  // register the wrong pages: refused with the buffer named.
  if (core_->api.is_device_memory != nullptr && core_->api.is_device_memory(data, bytes)) {
    // The emulated device's memory, which the CPU cannot read: what GPU memory registered for
    // GPUDirect is to a NIC (there is no GPU to flush).
    if (kind != MemoryKind::kCuda) {
      return Status(StatusCode::kInvalidArgument,
                    "verbs: register_memory: the emulated device's memory registered as host "
                    "memory (it is device memory: MemoryKind::kCuda)");
    }
    return make_region(data, bytes, {}, MemoryKind::kCuda);
  }
  EC_RETURN_IF_ERROR(gpu::check_buffer_kind(data, kind, "verbs: register_memory"));
  if (kind == MemoryKind::kCuda) return make_cuda_region(data, bytes, {});
  return make_region(data, bytes, {});
}

}  // namespace eagercomm::verbs
