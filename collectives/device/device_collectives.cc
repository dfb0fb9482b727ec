#include "collectives/device/device_collectives.h"

#include <cstdint>

#include "collectives/collective_log.h"
#include "collectives/cuda/cuda_reduce.h"
#include "collectives/device/device_routing.h"

namespace eagercomm::detail {

namespace {

// count * width * blocks without overflow, or kInvalidArgument naming `what`.
Result<size_t> checked_bytes(const char* what, size_t count, DataType type, size_t blocks) {
  const size_t es = dtype_size(type);
  if (count > SIZE_MAX / es / 2 / blocks) {
    return make_status(StatusCode::kInvalidArgument, "%s of CUDA buffers: count %zu is too large",
                       what, count);
  }
  return count * es;
}

}  // namespace

Result<std::unique_ptr<DeviceStaging>> DeviceStaging::create(int device) {
  EC_ASSIGN_OR_RETURN(gpu::Stream stream, gpu::Stream::create(device));
  EC_INFO(kColl,
          "device buffers in collectives: staging through pinned host memory on a stream of "
          "this communicator on GPU %d",
          device);
  return std::unique_ptr<DeviceStaging>(new DeviceStaging(std::move(stream)));
}

Status DeviceStaging::check_device(const char* what, const void* a, const void* b) const {
  for (const void* p : {a, b}) {
    if (!is_device_pointer(p)) continue;
    EC_ASSIGN_OR_RETURN(const int device, gpu::device_of(p));
    if (device != stream_.device()) {
      return make_status(StatusCode::kInvalidArgument,
                         "%s: a buffer is memory of GPU %d, but this communicator's device "
                         "buffers are on GPU %d (its first device call's): one device per "
                         "communicator",
                         what, device, stream_.device());
    }
  }
  return Status::Ok();
}

Result<void*> DeviceStaging::pinned(gpu::PinnedBuffer& buf, size_t bytes) {
  if (bytes == 0) return static_cast<void*>(nullptr);
  const size_t want = staging_capacity(buf.data() ? buf.size() : 0, bytes);
  if (buf.data() == nullptr || want != buf.size()) {
    // Free the old buffer first: holding both could exhaust pinned memory on a large growth.
    buf = gpu::PinnedBuffer();
    EC_ASSIGN_OR_RETURN(buf, gpu::PinnedBuffer::allocate(want));
  }
  return buf.data();
}

Result<void*> DeviceStaging::device(gpu::DeviceBuffer& buf, size_t bytes) {
  if (bytes == 0) return static_cast<void*>(nullptr);
  const size_t want = staging_capacity(buf.data() ? buf.size() : 0, bytes);
  if (buf.data() == nullptr || want != buf.size()) {
    buf = gpu::DeviceBuffer();  // as above
    EC_ASSIGN_OR_RETURN(buf, gpu::DeviceBuffer::allocate(want));
  }
  return buf.data();
}

Status DeviceStaging::copy_sync(void* dst, const void* src, size_t bytes, void* user_stream) {
  if (bytes == 0) return Status::Ok();
  // The caller's buffers are written (and read) by work on its stream that may still be
  // running: the staging stream is non-blocking, so it is ordered after that work.
  EC_RETURN_IF_ERROR(stream_.wait_for(user_stream));
  const Status copied = gpu::copy_async(dst, src, bytes, stream_.handle());
  const Status synced = stream_.synchronize();  // also when the copy failed: nothing in flight
  return copied.ok() ? synced : copied;
}

Result<void*> DeviceStaging::gather_staged(HostCollectives& host, const char* what,
                                           const void* send, size_t count, DataType type,
                                           void* user_stream, Status local, size_t* bytes_out) {
  const size_t P = static_cast<size_t>(host.size());
  void* staged = nullptr;
  void* gathered = nullptr;
  Result<size_t> bytes = checked_bytes(what, count, type, P);
  // Whatever fails before the allgather fails it on every rank (local_error), not just here.
  if (local.ok()) local = bytes.status();
  if (local.ok()) {
    Result<void*> s = pinned(send_, *bytes);
    Result<void*> g = s.ok() ? pinned(gathered_, *bytes * P) : Result<void*>(s.status());
    local = g.status();
    if (local.ok()) {
      staged = *s;
      gathered = *g;
      // Before recv is written: send may lie in it.
      local = copy_sync(staged, send, *bytes, user_stream);
    }
  }
  EC_RETURN_IF_ERROR(host.allgather(staged, gathered, count, type, local));
  *bytes_out = *bytes;
  return gathered;
}

Status DeviceStaging::allreduce(HostCollectives& host, const void* send, void* recv, size_t count,
                                DataType type, ReduceOp op, void* user_stream) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t P = static_cast<size_t>(host.size());
  Result<gpu::DeviceScope> scope = gpu::DeviceScope::enter(stream_.device());
  Status local = scope.status();
  if (local.ok()) local = check_device("allreduce", send, recv);
  // The kernels write recv when it is device memory (send is only copied: any alignment).
  if (local.ok() && is_device_pointer(recv)) local = cuda::check_alignment("allreduce", type, recv);
  size_t b = 0;
  EC_ASSIGN_OR_RETURN(void* gathered,
                      gather_staged(host, "allreduce", send, count, type, user_stream, local, &b));
  if (count == 0) return Status::Ok();

  // Past the allgather every rank has every contribution: a failure from here on is this
  // rank's alone (the peers' results do not depend on it).
  const bool recv_on_device = is_device_pointer(recv);
  EC_ASSIGN_OR_RETURN(void* scratch, device(scratch_, b * P + (recv_on_device ? 0 : b)));
  uint8_t* blocks = static_cast<uint8_t*>(scratch);
  void* out = recv_on_device ? recv : blocks + b * P;
  void* stream = stream_.handle();
  const auto enqueue = [&]() -> Status {
    EC_RETURN_IF_ERROR(gpu::copy_async(blocks, gathered, b * P, stream));
    if (P == 1) {
      EC_RETURN_IF_ERROR(gpu::copy_async(out, blocks, b, stream));
    } else {
      // Rank order on every rank: the same kernels on the same inputs, so the same bits.
      EC_RETURN_IF_ERROR(cuda::reduce(type, op, out, blocks, blocks + b, count, stream));
      for (size_t k = 2; k < P; ++k) {
        EC_RETURN_IF_ERROR(cuda::reduce(type, op, out, out, blocks + k * b, count, stream));
      }
    }
    // recv is the caller's: written after the work on its stream (send may be recv).
    if (!recv_on_device) EC_RETURN_IF_ERROR(gpu::copy_async(recv, out, b, stream));
    return Status::Ok();
  };
  // recv on the device is written by the kernels: they too wait for the caller's stream.
  Status s = stream_.wait_for(user_stream);
  if (s.ok()) s = enqueue();
  // Waited for also after a failure: what was enqueued must not run on after the call returned.
  const Status synced = stream_.synchronize();
  return s.ok() ? synced : s;
}

Status DeviceStaging::broadcast(HostCollectives& host, void* buf, size_t count, DataType type,
                                int root, void* user_stream) {
  std::lock_guard<std::mutex> lock(mu_);
  Result<gpu::DeviceScope> scope = gpu::DeviceScope::enter(stream_.device());
  Status local = scope.status();
  if (local.ok()) local = check_device("broadcast", buf, buf);
  Result<size_t> bytes = checked_bytes("broadcast", count, type, 1);
  if (local.ok()) local = bytes.status();
  void* staged = nullptr;
  if (local.ok()) {
    Result<void*> s = pinned(send_, *bytes);
    local = s.status();
    if (local.ok()) staged = *s;
  }
  if (local.ok() && host.rank() == root) local = copy_sync(staged, buf, *bytes, user_stream);
  EC_RETURN_IF_ERROR(host.broadcast(staged, count, type, root, local));
  if (host.rank() == root) return Status::Ok();
  return copy_sync(buf, staged, *bytes, user_stream);
}

Status DeviceStaging::allgather(HostCollectives& host, const void* send, void* recv, size_t count,
                                DataType type, void* user_stream) {
  std::lock_guard<std::mutex> lock(mu_);
  Result<gpu::DeviceScope> scope = gpu::DeviceScope::enter(stream_.device());
  Status local = scope.status();
  if (local.ok()) local = check_device("allgather", send, recv);
  size_t b = 0;
  EC_ASSIGN_OR_RETURN(void* gathered,
                      gather_staged(host, "allgather", send, count, type, user_stream, local, &b));
  return copy_sync(recv, gathered, b * static_cast<size_t>(host.size()), user_stream);
}

}  // namespace eagercomm::detail
