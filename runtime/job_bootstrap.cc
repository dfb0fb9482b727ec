#include "runtime/job_bootstrap.h"

#include "runtime/log.h"

namespace eagercomm {

Result<JobBootstrap> join_job(const RuntimeConfig& config) {
  JobBootstrap job;
  EC_ASSIGN_OR_RETURN(job.info, discover_launch(process_environment(), config));
  const LaunchInfo& info = job.info;
  // This process is that rank from here on: its lines (and the callers' transports, bench_p2p
  // creates its own) carry it.
  log_set_thread_rank(info.rank);
  uint16_t port = info.store_port;
  std::string host = info.store_host;
  if (info.serve_store) {
    EC_ASSIGN_OR_RETURN(job.server, TcpStoreServer::start("0.0.0.0", info.store_port, info.token));
    port = job.server->port();
    if (host.empty()) host = "127.0.0.1";
  }
  EC_INFO(kBoot, "job %s of %d ranks (%s): bootstrap store %s:%u%s", info.job_id.c_str(), info.size,
          info.launcher.c_str(), host.c_str(), port, info.serve_store ? " (served here)" : "");
  EC_ASSIGN_OR_RETURN(job.store, TcpStore::connect(host, port, info.token, config.timeout));
  return job;
}

}  // namespace eagercomm
