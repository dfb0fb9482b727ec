// list_verbs_devices(): libibverbs' view of this host, as plain data (verbs_device.h).
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "runtime/build_config.h"
#include "transport/transport_log.h"
#include "transport/verbs/verbs_device.h"

#if EAGERCOMM_HAVE_VERBS
#include "transport/verbs/verbs_api.h"
#endif

namespace eagercomm::verbs {

#if EAGERCOMM_HAVE_VERBS
namespace {

LinkLayer link_of(uint8_t link_layer) {
  switch (link_layer) {
    case IBV_LINK_LAYER_ETHERNET:
      return LinkLayer::kEthernet;
    case IBV_LINK_LAYER_INFINIBAND:
    case IBV_LINK_LAYER_UNSPECIFIED:  // older drivers: InfiniBand
      return LinkLayer::kInfiniBand;
    default:
      return LinkLayer::kUnknown;
  }
}

// The GID table of one port. Entries that cannot be read stay empty (unused entries of RoCE
// tables answer with an error, which is normal).
std::vector<Gid> gid_table(const VerbsApi& api, ibv_context* ctx, uint8_t port, int length) {
  std::vector<Gid> out(static_cast<size_t>(std::clamp(length, 0, 256)));
  for (size_t i = 0; i < out.size(); ++i) {
    ibv_gid_entry entry{};
    if (api.query_gid_ex(ctx, port, static_cast<uint32_t>(i), &entry, 0) != 0) continue;
    std::memcpy(out[i].raw.data(), entry.gid.raw, 16);
    out[i].roce_v2 = entry.gid_type == IBV_GID_TYPE_ROCE_V2;
  }
  return out;
}

// Where the NIC sits, from sysfs (verbs_device.h); the emulated device has no entry there.
void read_locality(DeviceInfo& info) {
  std::error_code ec;
  const std::filesystem::path device = "/sys/class/infiniband/" + info.name + "/device";
  const std::filesystem::path real = std::filesystem::canonical(device, ec);
  if (ec) return;
  info.pci_path = real.string();
  std::ifstream node(real / "numa_node");
  int n = -1;
  if (node >> n) info.numa_node = n;
}

}  // namespace

DeviceList list_verbs_devices() {
  Result<const VerbsApi*> api = system_verbs_api();
  if (!api.ok()) return DeviceList{{}, api.status().message()};
  return list_verbs_devices(*api.value());
}

DeviceList list_verbs_devices(const VerbsApi& api) {
  DeviceList out;
  int count = 0;
  ibv_device** list = api.get_device_list(&count);
  if (list == nullptr) {
    out.reason = errno == ENOSYS
                     ? "the kernel has no InfiniBand / RDMA support (ibv_get_device_list: ENOSYS)"
                     : std::string("ibv_get_device_list failed: ") + std::strerror(errno);
    return out;
  }
  for (int d = 0; d < count; ++d) {
    DeviceInfo info;
    info.name = api.get_device_name(list[d]);
    ibv_context* ctx = api.open_device(list[d]);
    if (ctx == nullptr) {
      EC_INFO(kNet, "verbs: cannot open %s: %s; leaving it out", info.name.c_str(),
              std::strerror(errno));
      continue;
    }
    ibv_device_attr attr{};
    if (api.query_device(ctx, &attr) == 0) {
      for (uint8_t p = 1; p <= attr.phys_port_cnt; ++p) {
        ibv_port_attr pa{};
        if (api.query_port(ctx, p, &pa) != 0) continue;
        PortInfo port;
        port.number = p;
        port.active = pa.state == IBV_PORT_ACTIVE;
        port.link = link_of(pa.link_layer);
        port.lid = pa.lid;
        port.active_mtu = pa.active_mtu >= IBV_MTU_256 ? 128u << pa.active_mtu : 0;
        port.gids = gid_table(api, ctx, p, pa.gid_tbl_len);
        info.ports.push_back(std::move(port));
      }
    }
    api.close_device(ctx);
    read_locality(info);
    out.devices.push_back(std::move(info));
  }
  api.free_device_list(list);
  if (out.devices.empty()) {
    out.reason = count == 0
                     ? "libibverbs lists no device (no RDMA NIC, or its driver is not loaded)"
                     : "no RDMA device could be opened";
  }
  return out;
}

#else

DeviceList list_verbs_devices() {
  return DeviceList{{},
                    "this build has no libibverbs (install libibverbs-dev librdmacm-dev and "
                    "reconfigure)"};
}

#endif

}  // namespace eagercomm::verbs
