#include "collectives/communicator_mpi.h"

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <random>

#include "collectives/collective_log.h"
#include "collectives/communicator_impl.h"
#include "runtime/tcp_store.h"

namespace eagercomm {
namespace {

// What rank 0 tells everybody: fixed size, so one MPI_Bcast of bytes carries it.
struct Rendezvous {
  char host[256];
  char token[65];
  char job[65];
  uint32_t port;
  int32_t status;  // 0: rank 0 serves; else a StatusCode why it could not
};

std::string random_hex(size_t bytes) {
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  std::string out;
  static const char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < bytes; ++i) {
    unsigned char c = 0;
    if (!urandom.read(reinterpret_cast<char*>(&c), 1))
      c = static_cast<unsigned char>(std::random_device{}());
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<Communicator>> communicator_from_mpi(MPI_Comm mpi_comm,
                                                            const CommunicatorOptions& options) {
  int rank = 0, size = 0;
  if (MPI_Comm_rank(mpi_comm, &rank) != MPI_SUCCESS ||
      MPI_Comm_size(mpi_comm, &size) != MPI_SUCCESS) {
    return Status(StatusCode::kInvalidArgument, "from MPI: not a valid MPI communicator");
  }
  EC_ASSIGN_OR_RETURN(Config config, effective_config(options));
  log_set_thread_rank(rank);
  Rendezvous rv{};
  std::shared_ptr<TcpStoreServer> server;
  Status failure;
  if (rank == 0) {
    const std::string token = config.job_token.empty() ? random_hex(16) : config.job_token;
    const std::string job = config.job_id.empty() ? "mpi-" + random_hex(6) : config.job_id;
    auto started =
        TcpStoreServer::start(config.master_addr.empty() ? "0.0.0.0" : config.master_addr,
                              static_cast<uint16_t>(config.master_port), token);
    if (started.ok()) {
      server = std::move(started).value();
      std::string host = config.master_addr;
      if (host.empty()) {
        char name[256] = {};
        gethostname(name, sizeof(name) - 1);
        host = name;
      }
      std::snprintf(rv.host, sizeof(rv.host), "%s", host.c_str());
      std::snprintf(rv.token, sizeof(rv.token), "%s", token.c_str());
      std::snprintf(rv.job, sizeof(rv.job), "%s", job.c_str());
      rv.port = server->port();
    } else {
      failure = started.status();
      rv.status = static_cast<int32_t>(failure.code());
    }
  }
  if (MPI_Bcast(&rv, sizeof(rv), MPI_BYTE, 0, mpi_comm) != MPI_SUCCESS) {
    return Status(StatusCode::kIoError, "from MPI: MPI_Bcast of the store address failed");
  }
  if (rv.status != 0) {
    if (rank == 0) return failure;
    return make_status(StatusCode::kPeerFailed,
                       "from MPI: rank 0 could not start the bootstrap "
                       "store (%s)",
                       std::string(status_code_name(static_cast<StatusCode>(rv.status))).c_str());
  }
  EC_INFO(kBoot, "MPI job of %d ranks: bootstrap store %s:%u, job %s", size, rv.host, rv.port,
          rv.job);
  EC_ASSIGN_OR_RETURN(
      std::unique_ptr<TcpStore> store,
      TcpStore::connect(rv.host, static_cast<uint16_t>(rv.port), rv.token, config.timeout));
  config.job_id = rv.job;
  CommunicatorOptions opts = options;
  opts.config = &config;
  opts.scope = options.scope + "/" + rv.job;
  return communicator_from_store(std::move(store), std::move(server), rank, size, opts);
}

}  // namespace eagercomm
