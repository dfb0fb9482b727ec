// Selection of a transport backend by name (EAGERCOMM_TRANSPORT).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/status.h"
#include "runtime/store.h"
#include "transport/transport.h"
#include "transport/transport_config.h"

namespace eagercomm {

// What a backend needs to create the endpoint of one rank.
struct TransportParams {
  int rank = 0;
  int size = 1;
  const TransportConfig* config = nullptr;
  Store* store = nullptr;   // bootstrap store shared by the ranks of this communicator
  std::string scope;        // prefix for this communicator's store keys
  bool in_process = false;  // every rank is a thread of this process (make_inproc_world)
};

struct TransportInfo {
  std::string name;
  std::string description;
  bool compiled = false;   // built into this library
  bool available = false;  // usable on this machine right now
  std::string reason;      // why not, when !available; a note when available (emulated)
};

// Every backend the registry knows, compiled in or not, with its availability here.
std::vector<TransportInfo> list_transports();

// Creates the backend called `name` ("inproc", "shm", "ucx", "verbs"; "auto" picks one).
// Errors: kInvalidArgument for a name nobody knows (the message lists the known names),
// kUnavailable for a backend not compiled in or not usable here (the message says why).
Result<std::unique_ptr<Transport>> create_transport(std::string_view name,
                                                    const TransportParams& params);

// The backend `name` stands for. "auto": inproc when the ranks are threads of one process; else
// shm when every rank runs on this host (same boot id, same IPC namespace: what POSIX shared
// memory needs), else ucx. Deciding needs every rank's host identity, exchanged through
// params.store under params.scope: "auto" is collective.
Result<std::string> resolve_transport_name(std::string_view name, const TransportParams& params);

}  // namespace eagercomm
