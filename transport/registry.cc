#include "transport/registry.h"

#include "runtime/build_config.h"
#include "runtime/host_identity.h"
#include "transport/inproc/inproc_transport.h"
#include "transport/shm/shm_transport.h"
#include "transport/sim/sim_network.h"
#include "transport/transport_log.h"
#if EAGERCOMM_HAVE_UCX
#include "transport/ucx/ucx_transport.h"
#endif
#if EAGERCOMM_HAVE_VERBS
#include "transport/verbs/verbs_transport.h"
#endif
#include "transport/verbs/verbs_device.h"

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
    {"shm", "processes on one host over POSIX shared memory", &create_shm_transport},
#if EAGERCOMM_HAVE_UCX
    {"ucx", "UCX UCP one-sided puts (shared memory, TCP, RDMA)",
     [](const TransportParams& p) { return create_ucx_transport(p); }},
#else
    {"ucx", "UCX UCP one-sided puts (shared memory, TCP, RDMA)", nullptr},
#endif
#if EAGERCOMM_HAVE_VERBS
    {"verbs", "InfiniBand / RoCE RC queue pairs with RDMA_WRITE_WITH_IMM (not yet run on hardware)",
     &create_verbs_transport},
#else
    {"verbs", "InfiniBand / RoCE RC queue pairs with RDMA_WRITE_WITH_IMM", nullptr},
#endif
    {"sim", "a simulated network (LogGP) on a virtual clock, every rank in one process",
     &sim::create_sim_transport},
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
    const std::string name = b.name;
    if (!info.compiled) {
      info.reason = name == "ucx"     ? "built without UCX (install libucx-dev and reconfigure)"
                    : name == "verbs" ? "built without libibverbs (install libibverbs-dev "
                                        "librdmacm-dev and reconfigure)"
                                      : "not built into this library yet";
    } else if (name == "sim" && sim::installed_network() == nullptr) {
      info.available = false;
      info.reason = "only inside a simulation (eagercomm-sim)";
    } else if (name == "verbs") {  // usable only where an RDMA port is active
      if (Result<VerbsConfig> env = VerbsConfig::from_environ();
          env.ok() && env.value().verbs_emulate) {
        info.reason = "on the emulated RDMA device (EAGERCOMM_VERBS_EMULATE=1), not a NIC";
        out.push_back(std::move(info));
        continue;
      }
      const verbs::DeviceList devices = verbs::list_verbs_devices();
      const auto chosen =
          verbs::choose_endpoint(devices.devices, TransportConfig{}, devices.reason);
      info.available = chosen.ok();
      if (!chosen.ok()) info.reason = chosen.status().message();
    }
    out.push_back(std::move(info));
  }
  return out;
}

Result<std::string> resolve_transport_name(std::string_view name, const TransportParams& params) {
  if (name == "auto") {
    if (params.in_process || params.size == 1) return std::string("inproc");
    if (params.store == nullptr) {
      return Status(StatusCode::kInvalidArgument, "transport auto: no store to compare hosts");
    }
    // Every rank publishes where it runs and compares with rank 0: all on rank 0's host means
    // shm, else ucx. A count of the ranks on rank 0's host, read once every rank has added to it
    // (the last one raises a flag), makes that O(1) store requests per rank instead of a read of
    // every rank's key on every rank (P^2 in all).
    const std::string key = params.scope + "/host/";
    const std::string mine = host_identity();
    EC_RETURN_IF_ERROR(params.store->set(key + std::to_string(params.rank), to_bytes(mine)));
    EC_ASSIGN_OR_RETURN(Bytes host0, params.store->get(key + "0", params.config->timeout));
    if (to_string(host0) == mine) EC_RETURN_IF_ERROR(params.store->add(key + "same", 1).status());
    EC_ASSIGN_OR_RETURN(const int64_t arrived, params.store->add(key + "arrived", 1));
    if (arrived == params.size) EC_RETURN_IF_ERROR(params.store->set(key + "all", to_bytes("1")));
    EC_RETURN_IF_ERROR(params.store->wait({key + "all"}, params.config->timeout));
    EC_ASSIGN_OR_RETURN(const int64_t same, params.store->add(key + "same", 0));
    const bool one_host = same == params.size;
    if (one_host) return std::string("shm");
#if EAGERCOMM_HAVE_UCX
    return std::string("ucx");
#else
    return Status(StatusCode::kUnavailable,
                  "transport auto: the ranks run on several hosts, which needs the ucx transport; "
                  "this build has no UCX (install libucx-dev and reconfigure)");
#endif
  }
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
                         "transport '%s' is not available in this build (compiled in: %s)", b.name,
                         compiled_names().c_str());
    }
    // Transports are created for each rank in turn by some callers (tests, in-process worlds
    // built on one thread): the creation's lines, and the threads it starts, carry its rank.
    ScopedLogRank scoped(params.rank);
    EC_DEBUG(kNet, "creating transport %s for %d ranks", b.name, params.size);
    return b.create(params);
  }
  return make_status(StatusCode::kInternal, "transport '%s' resolved but not found",
                     resolved.c_str());
}

}  // namespace eagercomm
