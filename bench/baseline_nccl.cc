// NCCL's allreduce as a baseline of eagercomm-bench --compare nccl --device cuda: one NCCL
// communicator over the job's ranks, bootstrapped through eagercomm's communicator (rank 0's
// ncclUniqueId is broadcast over it, so any launcher eagercomm runs under will do), on this
// process's current GPU, with one stream of its own.
#include <nccl.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "bench/baselines.h"
#include "runtime/gpu.h"

namespace eagercomm::bench {
namespace {

Status nccl_error(const char* what, ncclResult_t r, ncclComm_t comm = nullptr) {
  const char* last = comm ? ncclGetLastError(comm) : ncclGetLastError(nullptr);
  return make_status(StatusCode::kIoError, "nccl baseline: %s: %s%s%s", what, ncclGetErrorString(r),
                     last && *last ? ": " : "", last ? last : "");
}

Result<ncclDataType_t> nccl_type(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
  }
  return Status(StatusCode::kNotSupported, "nccl baseline: unknown data type");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
  }
  return ncclSum;
}

// The stream outlives the communicator (members are destroyed in reverse order).
struct NcclState {
  explicit NcclState(gpu::Stream s) : stream(std::move(s)) {}
  gpu::Stream stream;
  ncclComm_t comm = nullptr;
  ~NcclState() {
    if (comm) ncclCommDestroy(comm);
  }
};

// Rank 0's ncclUniqueId, on every rank. Element 0 says whether rank 0 got one, so a failure there
// fails every rank instead of leaving them waiting in ncclCommInitRank.
Result<ncclUniqueId> share_unique_id(Communicator& comm) {
  static_assert(sizeof(ncclUniqueId) % sizeof(int64_t) == 0);
  constexpr size_t kWords = sizeof(ncclUniqueId) / sizeof(int64_t);
  std::array<int64_t, kWords + 1> msg{};
  ncclResult_t got = ncclSuccess;
  if (comm.rank() == 0) {
    ncclUniqueId id;
    got = ncclGetUniqueId(&id);
    msg[0] = got == ncclSuccess;
    std::memcpy(&msg[1], &id, sizeof(id));
  }
  EC_RETURN_IF_ERROR(comm.broadcast(msg.data(), msg.size(), DataType::kInt64, 0));
  if (got != ncclSuccess) return nccl_error("ncclGetUniqueId", got);
  if (msg[0] != 1) return Status(StatusCode::kIoError, "nccl baseline: rank 0 got no unique id");
  ncclUniqueId id;
  std::memcpy(&id, &msg[1], sizeof(id));
  return id;
}

}  // namespace

Result<Baseline> make_nccl_baseline(Communicator& comm) {
  if (!gpu::available()) {
    return Status(StatusCode::kUnavailable, "--compare nccl: no GPU here");
  }
  EC_ASSIGN_OR_RETURN(const int device, gpu::current_device());
  EC_ASSIGN_OR_RETURN(gpu::Stream stream, gpu::Stream::create(device));
  auto state = std::make_shared<NcclState>(std::move(stream));
  EC_ASSIGN_OR_RETURN(ncclUniqueId id, share_unique_id(comm));
  if (ncclResult_t r = ncclCommInitRank(&state->comm, comm.size(), id, comm.rank());
      r != ncclSuccess) {
    state->comm = nullptr;
    return nccl_error("ncclCommInitRank", r);
  }
  int version = 0;
  ncclGetVersion(&version);
  Baseline b;
  b.name = "nccl";
  b.description = "NCCL " + std::to_string(version / 10000) + "." +
                  std::to_string(version / 100 % 100) + "." + std::to_string(version % 100) +
                  " (one communicator, one stream; each call waits for its stream)";
  b.state = state;
  NcclState* raw = state.get();
  // Synchronous like eagercomm's allreduce, whose staged device path returns once its stream is
  // done: both are timed from the barrier to the result being in recv.
  b.allreduce = [raw](const void* send, void* recv, size_t count, DataType type,
                      ReduceOp op) -> Status {
    EC_ASSIGN_OR_RETURN(ncclDataType_t t, nccl_type(type));
    const auto stream = static_cast<cudaStream_t>(raw->stream.handle());
    if (ncclResult_t r = ncclAllReduce(send, recv, count, t, nccl_op(op), raw->comm, stream);
        r != ncclSuccess) {
      return nccl_error("ncclAllReduce", r, raw->comm);
    }
    return raw->stream.synchronize();
  };
  return b;
}

}  // namespace eagercomm::bench
