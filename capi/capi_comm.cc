// The C API's communicators and blocking collectives (eagercomm.h).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "capi/capi_internal.h"
#include "collectives/communicator_impl.h"
#include "collectives/config.h"
#include "runtime/tcp_store.h"

namespace eagercomm::capi {
namespace {

// The job id (names of shared-memory segments) of a job joined by store address: the same on
// every rank of the job, and different for jobs on different stores.
std::string address_job_id(const std::string& host, int port) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (const char c : host + ":" + std::to_string(port)) {
    h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "capi-%016llx", static_cast<unsigned long long>(h));
  return buf;
}

Status from_store(const char* host, int port, const char* token, int rank, int size,
                  int serve_store, ec_comm** out) {
  if (host == nullptr || *host == '\0') {
    return Status(StatusCode::kInvalidArgument, "null or empty store host");
  }
  if (size < 1) return make_status(StatusCode::kInvalidArgument, "size %d is below 1", size);
  if (rank < 0 || rank >= size) {
    return make_status(StatusCode::kInvalidArgument, "rank %d is outside 0 .. %d", rank, size - 1);
  }
  if (serve_store != 0 && serve_store != 1) {
    return make_status(StatusCode::kInvalidArgument, "serve_store %d is neither 0 nor 1",
                       serve_store);
  }
  // Port 0 picks a free port, which the other ranks could not know.
  const bool alone = serve_store == 1 && size == 1;
  if (port < (alone ? 0 : 1) || port > 65535) {
    return make_status(StatusCode::kInvalidArgument, "store port %d is outside %d .. 65535", port,
                       alone ? 0 : 1);
  }
  const std::string tok = token != nullptr ? token : "";
  EC_ASSIGN_OR_RETURN(Config config, effective_config({}));
  std::unique_ptr<TcpStoreServer> server;
  uint16_t store_port = static_cast<uint16_t>(port);
  if (serve_store == 1) {
    EC_ASSIGN_OR_RETURN(server, TcpStoreServer::start("0.0.0.0", store_port, tok));
    store_port = server->port();
  }
  EC_ASSIGN_OR_RETURN(std::unique_ptr<TcpStore> store,
                      TcpStore::connect(host, store_port, tok, config.timeout));
  // Two communicators of one job (EAGERCOMM_JOB_ID set: from_env's and this one) must not
  // share store keys or segment names, so the scope also names the store.
  const std::string store_id = address_job_id(host, port);
  if (config.job_id.empty()) config.job_id = store_id;
  CommunicatorOptions options;
  options.config = &config;
  options.scope = "eagercomm/" + config.job_id + "/" + store_id;
  EC_ASSIGN_OR_RETURN(
      std::unique_ptr<Communicator> comm,
      communicator_from_store(std::move(store), std::shared_ptr<void>(std::move(server)), rank,
                              size, options));
  auto handle = std::make_unique<ec_comm>();
  handle->comm = std::move(comm);
  *out = handle.release();
  return Status::Ok();
}

}  // namespace
}  // namespace eagercomm::capi

using namespace eagercomm;
using namespace eagercomm::capi;

extern "C" {

ec_status ec_comm_from_env(ec_comm** out) {
  return guarded("ec_comm_from_env", [&]() -> Status {
    if (out == nullptr) return Status(StatusCode::kInvalidArgument, "null output pointer");
    *out = nullptr;
    EC_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, Communicator::from_env());
    auto handle = std::make_unique<ec_comm>();
    handle->comm = std::move(comm);
    *out = handle.release();
    return Status::Ok();
  });
}

ec_status ec_comm_from_store(const char* host, int port, const char* token, int rank, int size,
                             int serve_store, ec_comm** out) {
  return guarded("ec_comm_from_store", [&]() -> Status {
    if (out == nullptr) return Status(StatusCode::kInvalidArgument, "null output pointer");
    *out = nullptr;
    return from_store(host, port, token, rank, size, serve_store, out);
  });
}

ec_status ec_comm_rank(const ec_comm* comm, int* rank) {
  return guarded("ec_comm_rank", [&]() -> Status {
    EC_ASSIGN_OR_RETURN(Communicator * c, comm_of(comm));
    if (rank == nullptr) return Status(StatusCode::kInvalidArgument, "null output pointer");
    *rank = c->rank();
    return Status::Ok();
  });
}

ec_status ec_comm_size(const ec_comm* comm, int* size) {
  return guarded("ec_comm_size", [&]() -> Status {
    EC_ASSIGN_OR_RETURN(Communicator * c, comm_of(comm));
    if (size == nullptr) return Status(StatusCode::kInvalidArgument, "null output pointer");
    *size = c->size();
    return Status::Ok();
  });
}

ec_status ec_comm_destroy(ec_comm* comm) {
  return guarded("ec_comm_destroy", [&]() -> Status {
    EC_ASSIGN_OR_RETURN(Communicator * c, comm_of(comm));
    c->destroy();
    return Status::Ok();
  });
}

ec_status ec_comm_abort(ec_comm* comm, const char* reason) {
  return guarded("ec_comm_abort", [&]() -> Status {
    EC_ASSIGN_OR_RETURN(Communicator * c, comm_of(comm));
    c->abort(reason != nullptr ? reason : "");
    return Status::Ok();
  });
}

void ec_comm_free(ec_comm* comm) {
  if (comm == nullptr || comm->magic != kCommMagic) return;
  (void)guarded("ec_comm_free", [&]() -> Status {
    comm->magic = 0;
    delete comm;  // ~Communicator destroys
    return Status::Ok();
  });
}

ec_status ec_allreduce_on_stream(ec_comm* comm, const void* send, void* recv, size_t count,
                                 ec_dtype dtype, ec_op op, void* cuda_stream, int64_t timeout_ms) {
  return guarded("ec_allreduce", [&]() -> Status {
    EC_ASSIGN_OR_RETURN(Communicator * c, comm_of(comm));
    EC_ASSIGN_OR_RETURN(DataType type, to_dtype(dtype));
    EC_ASSIGN_OR_RETURN(ReduceOp redop, to_op(op));
    EC_ASSIGN_OR_RETURN(std::chrono::nanoseconds timeout, to_timeout(timeout_ms));
    return c->allreduce(send, recv, count, type, redop, CudaStream{cuda_stream}, timeout);
  });
}

ec_status ec_allreduce(ec_comm* comm, const void* send, void* recv, size_t count, ec_dtype dtype,
                       ec_op op, int64_t timeout_ms) {
  return ec_allreduce_on_stream(comm, send, recv, count, dtype, op, nullptr, timeout_ms);
}

ec_status ec_broadcast_on_stream(ec_comm* comm, void* buf, size_t count, ec_dtype dtype, int root,
                                 void* cuda_stream, int64_t timeout_ms) {
  return guarded("ec_broadcast", [&]() -> Status {
    EC_ASSIGN_OR_RETURN(Communicator * c, comm_of(comm));
    EC_ASSIGN_OR_RETURN(DataType type, to_dtype(dtype));
    EC_ASSIGN_OR_RETURN(std::chrono::nanoseconds timeout, to_timeout(timeout_ms));
    return c->broadcast(buf, count, type, root, CudaStream{cuda_stream}, timeout);
  });
}

ec_status ec_broadcast(ec_comm* comm, void* buf, size_t count, ec_dtype dtype, int root,
                       int64_t timeout_ms) {
  return ec_broadcast_on_stream(comm, buf, count, dtype, root, nullptr, timeout_ms);
}

ec_status ec_allgather_on_stream(ec_comm* comm, const void* send, void* recv, size_t count,
                                 ec_dtype dtype, void* cuda_stream, int64_t timeout_ms) {
  return guarded("ec_allgather", [&]() -> Status {
    EC_ASSIGN_OR_RETURN(Communicator * c, comm_of(comm));
    EC_ASSIGN_OR_RETURN(DataType type, to_dtype(dtype));
    EC_ASSIGN_OR_RETURN(std::chrono::nanoseconds timeout, to_timeout(timeout_ms));
    return c->allgather(send, recv, count, type, CudaStream{cuda_stream}, timeout);
  });
}

ec_status ec_allgather(ec_comm* comm, const void* send, void* recv, size_t count, ec_dtype dtype,
                       int64_t timeout_ms) {
  return ec_allgather_on_stream(comm, send, recv, count, dtype, nullptr, timeout_ms);
}

ec_status ec_comm_shrink(ec_comm* comm, int64_t timeout_ms, int* members, int capacity,
                         int* count) {
  return guarded("ec_comm_shrink", [&]() -> Status {
    EC_ASSIGN_OR_RETURN(Communicator * c, comm_of(comm));
    if (capacity < 0 || (members == nullptr && capacity > 0)) {
      return make_status(StatusCode::kInvalidArgument, "members buffer %s with capacity %d",
                         members ? "given" : "null", capacity);
    }
    EC_ASSIGN_OR_RETURN(std::chrono::nanoseconds timeout, to_timeout(timeout_ms));
    EC_ASSIGN_OR_RETURN(std::vector<int> shrunk, c->shrink(timeout));
    for (size_t i = 0; i < shrunk.size() && i < static_cast<size_t>(capacity); ++i) {
      members[i] = shrunk[i];
    }
    if (count != nullptr) *count = static_cast<int>(shrunk.size());
    return Status::Ok();
  });
}

ec_status ec_barrier(ec_comm* comm, int64_t timeout_ms) {
  return guarded("ec_barrier", [&]() -> Status {
    EC_ASSIGN_OR_RETURN(Communicator * c, comm_of(comm));
    EC_ASSIGN_OR_RETURN(std::chrono::nanoseconds timeout, to_timeout(timeout_ms));
    return c->barrier(timeout);
  });
}

}  // extern "C"
