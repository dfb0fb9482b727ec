#include "transport/registry.h"

#include "runtime/log.h"
#include "transport/inproc_transport.h"

namespace eagercomm {
namespace {

struct Backend {
  const char* name;
  const char* description;
  // nullptr: not compiled into this build.
  Result<std::unique_ptr<Transport>> (*create)(const TransportParams&);
};

// Backends not yet built into the library keep a row so that their names give a precise
// "not available in this build" instead of "unknown transport".
constexpr Backend kBackends[] = {
    {"inproc", "ranks as threads of one process; memcpy + release-ordered notification",
     &create_inproc_transport},
    {"shm", "processes on one host over POSIX shared memory", nullptr},
    {"ucx", "UCX UCP one-sided puts (shared memory, TCP, RDMA)", nullptr},
    {"verbs", "InfiniBand / RoCE RC queue pairs with RDMA_WRITE_WITH_IMM", nullptr},
};

std::string known_names() {
  std::string out = "auto";
  for (const Backend& b : kBackends) {
    out += "|";
    out += b.name;
  }
  return out;
}

std::string compiled_names() {
  std::string out;
  for (const Backend& b : kBackends) {
    if (!b.create) continue;
    if (!out.empty()) out += ", ";
    out += b.name;
  }
  return out;
}

}  // namespace

std::vector<TransportInfo> list_transports() {
  std::vector<TransportInfo> out;
  for (const Backend& b : kBackends) {
    TransportInfo info;
    info.name = b.name;
    info.description = b.description;
    info.compiled = b.create != nullptr;
    info.available = info.compiled;
    if (!info.compiled) info.reason = "not built into this library yet";
    out.push_back(std::move(info));
  }
  return out;
}

Result<std::string> resolve_transport_name(std::string_view name, const TransportParams& params) {
  (void)params;
  // With only the in-process backend built, "auto" can only mean inproc. The multi-process
  // backends extend this: verbs when an active RDMA port exists, ucx across hosts, shm within.
  if (name == "auto") return std::string("inproc");
  for (const Backend& b : kBackends) {
    if (name == b.name) return std::string(name);
  }
  return make_status(StatusCode::kInvalidArgument, "unknown transport '%.*s' (known: %s)",
                     static_cast<int>(name.size()), name.data(), known_names().c_str());
}

Result<std::unique_ptr<Transport>> create_transport(std::string_view name,
                                                    const TransportParams& params) {
  EC_ASSIGN_OR_RETURN(std::string resolved, resolve_transport_name(name, params));
  for (const Backend& b : kBackends) {
    if (resolved != b.name) continue;
    if (!b.create) {
      return make_status(StatusCode::kUnavailable,
                         "transport '%s' is not available in this build (compiled in: %s)",
                         b.name, compiled_names().c_str());
    }
    EC_DEBUG(kNet, "rank %d: creating transport %s", params.rank, b.name);
    return b.create(params);
  }
  return make_status(StatusCode::kInternal, "transport '%s' resolved but not found",
                     resolved.c_str());
}

}  // namespace eagercomm
