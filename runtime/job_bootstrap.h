// Joining the job this process was started in: read the launcher's variables, start the
// bootstrap store if this process serves it, connect to it. Communicator::from_env() and the
// benchmarks that drive a transport directly share this.
#pragma once

#include <memory>

#include "runtime/config.h"
#include "runtime/launch_env.h"
#include "runtime/tcp_store.h"

namespace eagercomm {

struct JobBootstrap {
  LaunchInfo info;
  std::unique_ptr<TcpStoreServer> server;  // set on the process that serves the store
  std::unique_ptr<TcpStore> store;
};

// Errors name what is missing (a launcher variable) or unreachable (the store's address).
Result<JobBootstrap> join_job(const RuntimeConfig& config);

}  // namespace eagercomm
