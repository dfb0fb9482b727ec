// The benchmark's send/recv buffers in host or device memory (--device). Device buffers are
// filled and checked through a host mirror, so the patterns and checks stay host code and only
// the copies in and out know where the bytes live.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "bench/bench_options.h"
#include "runtime/gpu.h"
#include "runtime/status.h"

namespace eagercomm::bench {

class BenchBuffer {
 public:
  // `bytes` of zeroed memory where `device` says. kUnavailable for cuda without a GPU.
  static Result<BenchBuffer> allocate(BufferDevice device, size_t bytes);
  BenchBuffer() = default;

  // What the collective is given: device memory for cuda, the host storage otherwise.
  void* data() { return device_.data() ? device_.data() : host(); }
  // The host side, written by prepare() and read by the checks (8-byte aligned).
  void* host() { return mirror_.data(); }
  // Host -> data() for [offset, offset + bytes); nothing to do for host buffers.
  Status upload(size_t offset, size_t bytes);
  // data() -> host for the first `bytes`; nothing to do for host buffers.
  Status download(size_t bytes);
  // Zeroes both sides.
  Status clear();

 private:
  std::vector<uint64_t> mirror_;
  gpu::DeviceBuffer device_;
};

// Ok, or why --device cuda cannot run here ("--device cuda: no GPU here: <reason>").
Status check_device_available(BufferDevice device);

}  // namespace eagercomm::bench
