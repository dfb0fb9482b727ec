// eagercomm-info: what this build of eagercomm is, what it can use here, and the value of
// every EAGERCOMM_* variable with where that value came from (like ucx_info -c and NCCL's
// INFO lines). Exits non-zero, with the reason, when the environment holds a bad value.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "collectives/algorithms/algorithms.h"
#include "collectives/config.h"
#include "collectives/engine/partner_layout.h"
#include "collectives/kernels/reduce_kernels.h"
#include "runtime/build_config.h"
#include "runtime/gpu.h"
#include "transport/mailbox_layout.h"
#include "transport/registry.h"
#include "transport/verbs/gpudirect.h"
#include "transport/verbs/verbs_cm_address.h"
#include "transport/verbs/verbs_connect.h"
#include "transport/verbs/verbs_device.h"

namespace {

void usage() {
  std::printf(
      "usage: eagercomm-info [-c] [-t] [-h]\n"
      "  (no option)  everything\n"
      "  -c           configuration variables only\n"
      "  -t           transports only\n");
}

// What one rank of a job holds for its peers with this configuration (CommunicatorStats reports
// a live communicator's), so that a user sizing a large job sees the cost before running it. The
// figures come from the layout communicators use (the rank that holds the most).
void print_resources_per_rank(const eagercomm::Config& config) {
  std::printf(
      "#\n# resources per rank with this configuration (connections: shm, ucx and verbs over\n"
      "# rdma_cm connect on first use, the data peers for the collectives and partial rounds;\n"
      "# verbs over the store path (EAGERCOMM_IB_CONNECT=store, or no IP on the device) every\n"
      "# pair at creation; mailbox: EAGERCOMM_SLOTS x EAGERCOMM_SLOT_BYTES for the ring "
      "neighbours, half\n"
      "# the slots for the other data peers (those the algorithms send data to), 4 x 1 KiB for\n"
      "# every other rank; twice that where the transport cannot store into the peers' memory:\n"
      "# ucx between hosts, verbs; ranks of one process, inproc, keep full slots for all)\n"
      "#   %6s %12s %11s %14s %14s\n",
      "ranks", "store conns", "data peers", "mailbox MiB", "staged MiB");
  for (int ranks : {2, 8, 64, 1000, 1024, 4096}) {
    uint64_t most = 0;
    size_t data_peers = 0;
    for (int rank = 0; rank < ranks; ++rank) {
      const auto layout = eagercomm::detail::partner_mailbox_layout(
          rank, ranks, eagercomm::SlotShape{config.slots, config.slot_bytes});
      most = std::max(most, eagercomm::mailbox_registered_bytes(*layout, rank, false));
      data_peers = std::max(data_peers, eagercomm::detail::data_partners(rank, ranks).size());
    }
    const double mib = static_cast<double>(most) / (1 << 20);
    std::printf("#   %6d %12d %11zu %14.1f %14.1f\n", ranks, ranks - 1, data_peers, mib, 2 * mib);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool show_config = true, show_transports = true, show_build = true;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "-c")) {
      show_transports = show_build = false;
    } else if (!std::strcmp(argv[i], "-t")) {
      show_config = show_build = false;
    } else if (!std::strcmp(argv[i], "-h") || !std::strcmp(argv[i], "--help")) {
      usage();
      return 0;
    } else {
      std::fprintf(stderr, "eagercomm-info: unknown option '%s'\n", argv[i]);
      usage();
      return 2;
    }
  }
  const auto& config = eagercomm::Config::process();
  if (!config.ok()) {
    std::fprintf(stderr, "eagercomm-info: %s\n", config.status().to_string().c_str());
    return 1;
  }
  if (show_build) {
    std::printf("# eagercomm %s (%s)\n", EAGERCOMM_VERSION_STRING, EAGERCOMM_BUILD_TYPE);
    std::printf("#   optional dependencies: ucx=%d verbs=%d cuda=%d mpi=%d torch=%d\n",
                EAGERCOMM_HAVE_UCX, EAGERCOMM_HAVE_VERBS, EAGERCOMM_HAVE_CUDA, EAGERCOMM_HAVE_MPI,
                EAGERCOMM_HAVE_TORCH);
    std::printf("#   reduction kernels: %s\n", eagercomm::reduce_kernels_isa());
  }
  if (show_transports) {
    std::printf("#\n# transports\n");
    for (const auto& t : eagercomm::list_transports()) {
      std::printf("#   %-7s compiled=%-3s available=%-3s %s%s%s\n", t.name.c_str(),
                  t.compiled ? "yes" : "no", t.available ? "yes" : "no", t.description.c_str(),
                  t.reason.empty() ? "" : " -- ", t.reason.c_str());
    }
  }
  if (show_transports) {
    namespace verbs = eagercomm::verbs;
    const verbs::DeviceList rdma = verbs::list_verbs_devices();
    std::printf("#\n# RDMA devices (libibverbs)\n");
    if (rdma.devices.empty()) std::printf("#   none: %s\n", rdma.reason.c_str());
    for (const verbs::DeviceInfo& d : rdma.devices) {
      for (const verbs::PortInfo& p : d.ports) {
        size_t gids = 0;
        for (const verbs::Gid& g : p.gids) gids += g.empty() ? 0 : 1;
        std::printf("#   %s port %u: %s, %s, lid %u, mtu %u, %zu GIDs in use\n", d.name.c_str(),
                    p.number, p.active ? "active" : "down", verbs::link_layer_name(p.link), p.lid,
                    p.active_mtu, gids);
      }
    }
    const auto chosen = verbs::choose_endpoint(rdma.devices, config.value(), rdma.reason);
    if (chosen.ok()) {
      const verbs::Endpoint& e = chosen.value();
      std::printf("#   the verbs transport would use %s port %u%s%s\n", e.device.c_str(), e.port,
                  e.use_gid ? ", GID " : "",
                  e.use_gid ? (std::to_string(e.gid_index) + " " + e.gid.to_string()).c_str() : "");
      // How its queue pairs would connect (EAGERCOMM_IB_CONNECT, verbs_connect.h).
      const verbs::CmAddress ip = verbs::find_cm_address(e.device, e.port);
      const auto cm = verbs::offers_cm(config.value().ib_connect, ip.found, ip.why_none);
      std::printf("#   connection set-up: %s\n", !cm.ok()     ? cm.status().message().c_str()
                                                 : cm.value() ? ("rdma_cm on " + ip.to_string() +
                                                                 " (store where a peer offers "
                                                                 "no rdma_cm)")
                                                                    .c_str()
                                                 : ip.found
                                                     ? "store (EAGERCOMM_IB_CONNECT=store)"
                                                     : ("store (" + ip.why_none + ")").c_str());
    } else {
      std::printf("#   the verbs transport cannot run here: %s\n",
                  chosen.status().message().c_str());
    }
  }
  if (show_transports) {
    const eagercomm::gpu::Inventory gpus = eagercomm::gpu::query();
    std::printf("#\n# GPUs (CUDA runtime %d, driver %d)\n", gpus.runtime_version,
                gpus.driver_version);
    if (gpus.devices.empty()) std::printf("#   none: %s\n", gpus.reason.c_str());
    for (const auto& d : gpus.devices) {
      std::printf("#   %d: %s, sm_%d%d, %.1f GiB, dma-buf %s\n", d.index, d.name.c_str(),
                  d.cc_major, d.cc_minor, static_cast<double>(d.memory_bytes) / (1 << 30),
                  d.dmabuf ? "yes" : "no");
    }
    const auto gd = eagercomm::verbs::choose_gpudirect(eagercomm::verbs::probe_gpudirect());
    std::printf("#   GPUDirect RDMA: %s (%s)\n", eagercomm::verbs::gpudirect_method_name(gd.method),
                gd.why.c_str());
  }
  if (show_config) {
    std::printf("#\n# configuration (value, source, accepted values)\n");
    for (const auto& row : config.value().describe()) {
      std::printf("%s=%s\n", row.name.c_str(), row.value.c_str());
      std::printf("#   source: %s; accepts: %s\n#   %s\n", row.source.c_str(), row.accepted.c_str(),
                  row.doc.c_str());
    }
    for (const auto& name : config.value().unknown_names) {
      std::printf("# warning: unknown variable %s\n", name.c_str());
    }
    print_resources_per_rank(config.value());
  }
  return 0;
}
