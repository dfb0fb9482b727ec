#include "bench/bench_memory.h"

#include <algorithm>
#include <cstring>

namespace eagercomm::bench {

Result<BenchBuffer> BenchBuffer::allocate(BufferDevice device, size_t bytes) {
  BenchBuffer b;
  b.mirror_.assign(bytes / 8 + 8, 0);
  if (device == BufferDevice::kCuda) {
    EC_ASSIGN_OR_RETURN(b.device_, gpu::DeviceBuffer::allocate(b.mirror_.size() * 8));
    EC_RETURN_IF_ERROR(gpu::zero(b.device_.data(), b.device_.size()));
    EC_RETURN_IF_ERROR(gpu::synchronize());
  }
  return b;
}

Status BenchBuffer::upload(size_t offset, size_t bytes) {
  if (!device_.data() || bytes == 0) return Status::Ok();
  // copy_and_wait: the collective that follows may run on another stream (the engine's).
  return gpu::copy_and_wait(static_cast<uint8_t*>(device_.data()) + offset,
                            static_cast<uint8_t*>(host()) + offset, bytes);
}

Status BenchBuffer::download(size_t bytes) {
  if (!device_.data() || bytes == 0) return Status::Ok();
  return gpu::copy_and_wait(host(), device_.data(), bytes);
}

Status BenchBuffer::clear() {
  std::fill(mirror_.begin(), mirror_.end(), 0);
  if (!device_.data()) return Status::Ok();
  EC_RETURN_IF_ERROR(gpu::zero(device_.data(), device_.size()));
  return gpu::synchronize();
}

Status check_device_available(BufferDevice device) {
  if (device != BufferDevice::kCuda || gpu::available()) return Status::Ok();
  const gpu::Inventory inv = gpu::query();
  return make_status(
      StatusCode::kUnavailable, "--device cuda: no GPU here: %s",
      inv.reason.empty() ? "the CUDA runtime reports no device" : inv.reason.c_str());
}

}  // namespace eagercomm::bench
