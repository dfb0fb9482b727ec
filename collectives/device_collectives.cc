#include "collectives/device_collectives.h"

#include <cstdint>

#include "collectives/cuda/cuda_reduce.h"
#include "collectives/device_routing.h"
#include "runtime/log.h"

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

Result<std::unique_ptr<DeviceStaging>> DeviceStaging::create() {
  EC_ASSIGN_OR_RETURN(gpu::Stream stream, gpu::Stream::create());
  EC_INFO(kColl,
          "device buffers in collectives: staging through pinned host memory on a "
          "stream of this communicator");
  return std::unique_ptr<DeviceStaging>(new DeviceStaging(std::move(stream)));
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

Status DeviceStaging::copy_sync(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return Status::Ok();
  // The caller's buffers are written (and read) by work on the legacy default stream that may
  // still be running: the staging stream is non-blocking, so it is ordered after that work.
  EC_RETURN_IF_ERROR(stream_.after_legacy_default());
  EC_RETURN_IF_ERROR(gpu::copy_async(dst, src, bytes, stream_.handle()));
  return stream_.synchronize();
}

Result<void*> DeviceStaging::gather_staged(HostCollectives& host, const char* what,
                                           const void* send, size_t count, DataType type,
                                           size_t* bytes_out) {
  const size_t P = static_cast<size_t>(host.size());
  void* staged = nullptr;
  void* gathered = nullptr;
  Result<size_t> bytes = checked_bytes(what, count, type, P);
  // Whatever fails before the allgather fails it on every rank (local_error), not just here.
  Status local = bytes.status();
  if (local.ok()) {
    Result<void*> s = pinned(send_, *bytes);
    Result<void*> g = s.ok() ? pinned(gathered_, *bytes * P) : Result<void*>(s.status());
    local = g.status();
    if (local.ok()) {
      staged = *s;
      gathered = *g;
      local = copy_sync(staged, send, *bytes);  // before recv is written: send may lie in it
    }
  }
  EC_RETURN_IF_ERROR(host.allgather(staged, gathered, count, type, local));
  *bytes_out = *bytes;
  return gathered;
}

Status DeviceStaging::allreduce(HostCollectives& host, const void* send, void* recv, size_t count,
                                DataType type, ReduceOp op) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t P = static_cast<size_t>(host.size());
  size_t b = 0;
  EC_ASSIGN_OR_RETURN(void* gathered, gather_staged(host, "allreduce", send, count, type, &b));
  if (count == 0) return Status::Ok();

  // Past the allgather every rank has every contribution: a failure from here on is this
  // rank's alone (the peers' results do not depend on it).
  const bool recv_on_device = is_device_pointer(recv);
  EC_ASSIGN_OR_RETURN(void* scratch, device(scratch_, b * P + (recv_on_device ? 0 : b)));
  uint8_t* blocks = static_cast<uint8_t*>(scratch);
  void* out = recv_on_device ? recv : blocks + b * P;
  void* stream = stream_.handle();
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
  if (!recv_on_device) EC_RETURN_IF_ERROR(gpu::copy_async(recv, out, b, stream));
  return stream_.synchronize();
}

Status DeviceStaging::broadcast(HostCollectives& host, void* buf, size_t count, DataType type,
                                int root) {
  std::lock_guard<std::mutex> lock(mu_);
  Result<size_t> bytes = checked_bytes("broadcast", count, type, 1);
  Status local = bytes.status();
  void* staged = nullptr;
  if (local.ok()) {
    Result<void*> s = pinned(send_, *bytes);
    local = s.status();
    if (local.ok()) staged = *s;
  }
  if (local.ok() && host.rank() == root) local = copy_sync(staged, buf, *bytes);
  EC_RETURN_IF_ERROR(host.broadcast(staged, count, type, root, local));
  if (host.rank() == root) return Status::Ok();
  return copy_sync(buf, staged, *bytes);
}

Status DeviceStaging::allgather(HostCollectives& host, const void* send, void* recv, size_t count,
                                DataType type) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t b = 0;
  EC_ASSIGN_OR_RETURN(void* gathered, gather_staged(host, "allgather", send, count, type, &b));
  return copy_sync(recv, gathered, b * static_cast<size_t>(host.size()));
}

}  // namespace eagercomm::detail
